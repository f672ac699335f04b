package main

import (
	"flag"
	"io"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/deploy"
)

var updateREADME = flag.Bool("update-readme", false, "rewrite docs/configuration.md's configuration table from the flags")

// TestREADMEConfigurationTable keeps docs/configuration.md's api table equal to the
// flags: on failure it prints the table to paste (or run the test with
// -update-readme).
func TestREADMEConfigurationTable(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../docs/configuration.md")
	require.NoError(t, err)
	fs, _ := newFlagSet(func(string) string { return "" }, io.Discard)
	want := deploy.FlagTable(fs.Flags())

	if *updateREADME {
		doc, err := deploy.ReplaceTableAfter(string(readme), "### api", want)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile("../../docs/configuration.md", []byte(doc), 0o644))
		return
	}
	got, err := deploy.TableAfter(string(readme), "### api")
	require.NoError(t, err, "docs/configuration.md needs a '### api' heading followed by this table:\n\n%s", want)
	require.Equal(t, want, got, "docs/configuration.md's api table disagrees with the flags; generated from them:\n\n%s", want)
}
