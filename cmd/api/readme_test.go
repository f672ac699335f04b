package main

import (
	"io"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/deploy"
)

// TestREADMEConfigurationTable keeps the README's api table equal to the
// flags: on failure it prints the table to paste.
func TestREADMEConfigurationTable(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	fs, _ := newFlagSet(func(string) string { return "" }, io.Discard)
	want := deploy.FlagTable(fs.Flags())

	got, err := deploy.TableAfter(string(readme), "### api")
	require.NoError(t, err, "README.md needs a '### api' heading followed by this table:\n\n%s", want)
	require.Equal(t, want, got, "README.md's api table disagrees with the flags; generated from them:\n\n%s", want)
}
