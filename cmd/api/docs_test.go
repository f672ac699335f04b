package main

import (
	"flag"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/docgen"
	"github.com/hookd/hookd/internal/telemetry/telemetrytest"
)

var updateDocs = flag.Bool("update-docs", false, "rewrite the api's generated blocks in docs/ (go generate ./... sets it)")

// TestGeneratedDocs keeps the api's blocks of docs/configuration.md (its
// usage and flags) and docs/observability.md (its series) equal to what
// the code generates; go generate ./... rewrites them.
func TestGeneratedDocs(t *testing.T) {
	fs, _ := newFlagSet(func(string) string { return "" }, io.Discard)
	require.NoError(t, docgen.Sync("../../docs/configuration.md", "api flags",
		"```\n"+synopsis+"\n```\n\n"+docgen.FlagTable(fs.Flags()), *updateDocs))

	rec := telemetrytest.NewRecorder()
	registerMetrics(rec)
	cat, err := rec.Catalogue()
	require.NoError(t, err)
	require.NoError(t, docgen.Sync("../../docs/observability.md", "api series", docgen.SeriesTable(cat), *updateDocs))
}
