package config_test

import (
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/hookd/hookd/internal/config"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestFlagsListsBindingsInOrder(t *testing.T) {
	t.Parallel()
	fs := config.New("x", "usage: x", func(string) string { return "" }, io.Discard)
	fs.String("url", "URL", "", "where")
	fs.Duration("grace", "GRACE", 30*time.Second, "how long")
	fs.Bool("quiet", "", false, "say less")

	require.Equal(t, []config.Flag{
		{Name: "url", Env: "URL", Default: "", Usage: "where"},
		{Name: "grace", Env: "GRACE", Default: "30s", Usage: "how long"},
		{Name: "quiet", Env: "", Default: "false", Usage: "say less"},
	}, fs.Flags())
	require.Equal(t, map[string]string{"--url": "URL", "--grace": "GRACE", "--quiet": ""}, fs.Names())
}

func TestParseEnvironmentThenFlags(t *testing.T) {
	t.Parallel()
	env := map[string]string{"GRACE": "5s", "URL": "from-env"}
	fs := config.New("x", "usage: x", func(k string) string { return env[k] }, io.Discard)
	url := fs.String("url", "URL", "", "where")
	grace := fs.Duration("grace", "GRACE", 30*time.Second, "how long")

	require.NoError(t, fs.Parse([]string{"--url", "from-flag"}))
	require.Equal(t, "from-flag", *url, "a flag wins over its environment twin")
	require.Equal(t, 5*time.Second, *grace)
}

func TestParseBadEnvironmentValueIsUsageError(t *testing.T) {
	t.Parallel()
	fs := config.New("x", "usage: x", func(k string) string { return map[string]string{"GRACE": "5"}[k] }, io.Discard)
	fs.Duration("grace", "GRACE", time.Second, "how long")

	var ue *config.UsageError
	require.ErrorAs(t, fs.Parse(nil), &ue)
	require.Contains(t, ue.Msg, "GRACE")
}
