package deploy_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/deploy"
	"github.com/hookd/hookd/internal/config"
)

func TestFlagTableAndTableAfter(t *testing.T) {
	t.Parallel()
	table := deploy.FlagTable([]config.Flag{
		{Name: "token", Env: "TOKEN", Usage: "bearer token"},
		{Name: "grace", Env: "GRACE", Default: "5s", Usage: "a|b"},
	})
	require.Equal(t, "| flag | environment | default | meaning |\n|---|---|---|---|\n"+
		"| `--token` | `TOKEN` |  | bearer token |\n"+
		"| `--grace` | `GRACE` | `5s` | a\\|b |\n", table)

	doc := "# x\n\n### tool\n\nFlags:\n\n" + table + "\nafter\n### next\n"
	got, err := deploy.TableAfter(doc, "### tool")
	require.NoError(t, err)
	require.Equal(t, table, got)

	_, err = deploy.TableAfter(doc, "### next")
	require.ErrorContains(t, err, "no table")
	_, err = deploy.TableAfter(doc, "### missing")
	require.ErrorContains(t, err, "no line")
}
