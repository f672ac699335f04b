package main

import (
	"flag"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/dispatcher"
	"github.com/hookd/hookd/internal/docgen"
	"github.com/hookd/hookd/internal/telemetry/telemetrytest"
)

var updateDocs = flag.Bool("update-docs", false, "rewrite the dispatcher's generated blocks in docs/ (go generate ./... sets it)")

// TestGeneratedDocs keeps the dispatcher's blocks of docs/configuration.md
// (its usage and flags) and docs/observability.md (its series) equal to
// what the code generates; go generate ./... rewrites them.
func TestGeneratedDocs(t *testing.T) {
	fs, _ := newFlagSet(func(string) string { return "" }, io.Discard)
	require.NoError(t, docgen.Sync("../../docs/configuration.md", "dispatcher flags",
		"```\n"+synopsis+"\n```\n\n"+docgen.FlagTable(fs.Flags()), *updateDocs))
	require.NoError(t, docgen.Sync("../../docs/observability.md", "dispatcher series", docgen.SeriesTable(catalogue(t)), *updateDocs))
}

// catalogue returns the families the dispatcher exports
// (dispatcher.RegisterMetrics, which its New calls).
func catalogue(t *testing.T) telemetrytest.Catalogue {
	t.Helper()
	rec := telemetrytest.NewRecorder()
	dispatcher.RegisterMetrics(rec, 0)
	cat, err := rec.Catalogue()
	require.NoError(t, err)
	return cat
}
