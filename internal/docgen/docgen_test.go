package docgen_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/config"
	"github.com/hookd/hookd/internal/docgen"
	"github.com/hookd/hookd/internal/telemetry/telemetrytest"
)

func TestFlagTable(t *testing.T) {
	t.Parallel()
	require.Equal(t, "| flag | environment | default | meaning |\n|---|---|---|---|\n"+
		"| `--token` | `TOKEN` |  | bearer token |\n"+
		"| `--grace` | `GRACE` | `5s` | a\\|b |\n",
		docgen.FlagTable([]config.Flag{
			{Name: "token", Env: "TOKEN", Usage: "bearer token"},
			{Name: "grace", Env: "GRACE", Default: "5s", Usage: "a|b"},
		}))
}

func TestSeriesTable(t *testing.T) {
	t.Parallel()
	require.Equal(t, "| series | type | labels | meaning |\n|---|---|---|---|\n"+
		"| `a_total` | counter | `endpoint`, `outcome` | As. |\n"+
		"| `b` | gauge |  | B. |\n"+
		"| `go_*`, `process_*` | | | Go runtime and process collectors |\n",
		docgen.SeriesTable(telemetrytest.Catalogue{
			"b":             {Name: "b", Type: "gauge", Help: "B.", Labels: []string{}},
			"go_goroutines": {Name: "go_goroutines", Type: "gauge"},
			"a_total":       {Name: "a_total", Type: "counter", Help: "As.", Labels: []string{"endpoint", "outcome"}},
		}))
}

// TestSync: a stale block fails and names the command; update rewrites
// only the block; a file without the markers is an error.
func TestSync(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "doc.md")
	doc := "# Doc\n\nprose\n" +
		"<!-- generated: x (go generate ./...; do not edit by hand) -->\nold\n<!-- end generated: x -->\n\nafter\n"
	require.NoError(t, os.WriteFile(file, []byte(doc), 0o644))

	err := docgen.Sync(file, "x", "new\n", false)
	require.ErrorContains(t, err, "doc.md: the x block is stale; run go generate ./...")
	require.NoError(t, docgen.Sync(file, "x", "old\n", false))

	require.NoError(t, docgen.Sync(file, "x", "new\n", true))
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	require.Equal(t, "# Doc\n\nprose\n"+
		"<!-- generated: x (go generate ./...; do not edit by hand) -->\nnew\n<!-- end generated: x -->\n\nafter\n", string(b))
	require.NoError(t, docgen.Sync(file, "x", "new\n", false))

	require.ErrorContains(t, docgen.Sync(file, "y", "new\n", false), "no line")
	require.ErrorContains(t, docgen.Sync(file, "y", "new\n", true), "no line")
}
