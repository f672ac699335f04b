//go:build !race

package main

import (
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/config"
	"github.com/hookd/hookd/internal/deploycheck"
)

// binary describes the dispatcher to the deployment checks: its real
// flags, and run itself parsing a command line and an environment.
func binary() deploycheck.Binary {
	fs, _ := newFlagSet(func(string) string { return "" }, io.Discard)
	return deploycheck.Binary{Name: "dispatcher", Flags: fs.Names(), Parse: checkArgs}
}

// The dispatcher's metrics address serves /healthz and /readyz too.
var dispatcherPorts = deploycheck.Ports{Health: "--metrics-addr", Metrics: "--metrics-addr"}

// checkArgs parses args and an environment as run does, and stops there.
var checkArgs = deploycheck.ParseWithHelp(run, func(err error) bool { return errors.Is(err, config.ErrHelp) })

func loadDockerfile(t *testing.T) *deploycheck.Dockerfile {
	t.Helper()
	df, err := deploycheck.LoadDockerfile("../../Dockerfile")
	require.NoError(t, err)
	return df
}

// composeRuns loads docker-compose.yml, passed through edit first when
// edit is not nil.
func composeRuns(t *testing.T, edit func(string) string) []deploycheck.ComposeRun {
	t.Helper()
	b, err := os.ReadFile("../../docker-compose.yml")
	require.NoError(t, err)
	if edit != nil {
		b = []byte(edit(string(b)))
	}
	p, err := deploycheck.LoadCompose("../../docker-compose.yml", b, map[string]string{"API_TOKEN": "t"})
	require.NoError(t, err)
	runs, errs := deploycheck.ComposeRuns(p, loadDockerfile(t))
	require.NoError(t, errors.Join(errs...))
	return runs
}

// TestDockerfileShipsTheDispatcher: the shipped image holds the
// dispatcher, built with cgo off, next to the api.
func TestDockerfileShipsTheDispatcher(t *testing.T) {
	t.Parallel()
	require.NoError(t, errors.Join(deploycheck.CheckImage(loadDockerfile(t), "", "./cmd/dispatcher", "dispatcher")...))
}

func TestComposeRunsRealFlags(t *testing.T) {
	t.Parallel()
	services, errs := deploycheck.CheckCompose(composeRuns(t, nil), binary(), dispatcherPorts)
	require.NoError(t, errors.Join(errs...))
	require.Equal(t, []string{"dispatcher"}, services)
}

func TestComposeCheckFailsOnRenames(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		from, to, want string
	}{
		"environment variable renamed in the file": {
			"METRICS_ADDR: 0.0.0.0:9090", "METRICS_LISTEN: 0.0.0.0:9090",
			"service dispatcher: environment variable METRICS_LISTEN is not the twin of any dispatcher flag",
		},
		"subcommand misspelt": {
			`["dispatcher", "run"]`, `["dispatcher", "serve"]`,
			`unexpected argument "serve"`,
		},
		"bad value": {
			"METRICS_ADDR: 0.0.0.0:9090", "METRICS_ADDR: 0.0.0.0:9090\n      WORKERS: lots",
			`WORKERS="lots": must be an integer`,
		},
		"metrics published on the host": {
			"    expose:\n      - \"9090\"\n", "    ports:\n      - \"9090:9090\"\n",
			"service dispatcher: publishes /metrics (port 9090) on the host",
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			runs := composeRuns(t, func(s string) string {
				require.Contains(t, s, tc.from)
				return strings.Replace(s, tc.from, tc.to, 1)
			})
			_, errs := deploycheck.CheckCompose(runs, binary(), dispatcherPorts)
			require.ErrorContains(t, errors.Join(errs...), tc.want)
		})
	}
	t.Run("flag renamed in the code", func(t *testing.T) {
		t.Parallel()
		b := binary()
		require.Equal(t, "METRICS_ADDR", b.Flags["--metrics-addr"])
		delete(b.Flags, "--metrics-addr")
		b.Flags["--metrics-listen"] = "METRICS_LISTEN"
		_, errs := deploycheck.CheckCompose(composeRuns(t, nil), b, deploycheck.Ports{Health: "--metrics-listen", Metrics: "--metrics-listen"})
		require.ErrorContains(t, errors.Join(errs...), "service dispatcher: environment variable METRICS_ADDR is not the twin of any dispatcher flag")
	})
}

func TestCheckArgsStopsAtParsing(t *testing.T) {
	t.Parallel()
	noEnv := func(string) string { return "" }
	require.NoError(t, checkArgs(nil, noEnv))
	require.NoError(t, checkArgs([]string{"run", "--workers", "10"}, noEnv))
	require.NoError(t, checkArgs([]string{"migrate"}, noEnv))
	require.ErrorContains(t, checkArgs([]string{"serve"}, noEnv), `unexpected argument "serve"`)
	require.ErrorContains(t, checkArgs([]string{"--request-timeout", "5"}, noEnv), "must be a Go duration")
}
