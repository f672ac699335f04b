//go:build !race

package main

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/config"
	"github.com/hookd/hookd/internal/deploycheck"
)

// binary describes the api to the deployment checks: its real flags, and
// run itself parsing a command line and an environment.
func binary() deploycheck.Binary {
	fs, _ := newFlagSet(func(string) string { return "" }, io.Discard)
	return deploycheck.Binary{Name: "api", Flags: fs.Names(), Parse: checkArgs}
}

var apiPorts = deploycheck.Ports{Health: "--listen-addr", Metrics: "--metrics-addr"}

// checkArgs parses args and an environment as run does, and stops there.
var checkArgs = deploycheck.ParseWithHelp(run, func(err error) bool { return errors.Is(err, config.ErrHelp) })

// composeEnv is what the compose file's required ${VAR}s read.
var composeEnv = map[string]string{"API_TOKEN": "t"}

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
	p, err := deploycheck.LoadCompose("../../docker-compose.yml", b, composeEnv)
	require.NoError(t, err)
	runs, errs := deploycheck.ComposeRuns(p, loadDockerfile(t))
	require.NoError(t, errors.Join(errs...))
	return runs
}

// TestDockerfileShipsTheAPI: the image is built with cgo off, holds the
// api on its PATH, runs as non-root, and its default command is one the
// api accepts.
func TestDockerfileShipsTheAPI(t *testing.T) {
	t.Parallel()
	df := loadDockerfile(t)
	require.NoError(t, errors.Join(deploycheck.CheckImage(df, "", "./cmd/api", "api")...))
	img, err := df.Image("")
	require.NoError(t, err)
	require.Equal(t, "api", img.Program())
	argv := slices.Concat(img.Entrypoint, img.Cmd)
	require.NoError(t, errors.Join(binary().CheckInvocation(argv[1:], nil)...))
}

func TestComposeRunsRealFlags(t *testing.T) {
	t.Parallel()
	services, errs := deploycheck.CheckCompose(composeRuns(t, nil), binary(), apiPorts)
	require.NoError(t, errors.Join(errs...))
	require.Equal(t, []string{"api", "migrate"}, services)
}

// TestComposeLetsTheTourReachItsReceiver: the receiver service listens on
// the compose network, and the api and the dispatcher may deliver to it
// (a private address the SSRF guard refuses by default).
func TestComposeLetsTheTourReachItsReceiver(t *testing.T) {
	t.Parallel()
	runs := composeRuns(t, nil)
	i := slices.IndexFunc(runs, func(r deploycheck.ComposeRun) bool { return r.Service == "receiver" })
	require.GreaterOrEqual(t, i, 0, "docker-compose.yml has no receiver service")
	require.Equal(t, "receiver", runs[i].Program)
	addr := runs[i].Args[slices.Index(runs[i].Args, "--addr")+1]
	port, err := deploycheck.ServedPort(addr)
	require.NoError(t, err)
	require.Equal(t, 9000, port)
	require.Equal(t, "receiver", runs[i].Config.Build.Target)
	require.NoError(t, errors.Join(deploycheck.CheckImage(loadDockerfile(t), "receiver", "./internal/delivery/deliverytest/cmd/receiver", "receiver")...))

	// The receiver's flags are Go's flag package's: built, it parses the
	// service's command and stops at -h (exit 0); an unknown flag exits 2.
	bin := filepath.Join(t.TempDir(), "receiver")
	out, err := exec.Command("go", "build", "-o", bin, "../../internal/delivery/deliverytest/cmd/receiver").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	out, err = exec.Command(bin, append(slices.Clone(runs[i].Args), "-h")...).CombinedOutput()
	require.NoError(t, err, "receiver %q: %s", runs[i].Args, out)
	out, err = exec.Command(bin, "--address", addr, "-h").CombinedOutput()
	require.Error(t, err, "an unknown flag fails: %s", out)
	for _, r := range runs {
		if r.Service == "api" || r.Service == "dispatcher" {
			require.Equal(t, "true", r.Env["ALLOW_PRIVATE_TARGETS"], "service %s must allow the receiver's private address", r.Service)
		}
	}
}

func TestComposeCheckFailsOnRenames(t *testing.T) {
	t.Parallel()
	b := binary()
	for name, tc := range map[string]struct {
		from, to, want string
	}{
		"environment variable renamed in the file": {
			"LISTEN_ADDR:", "LISTEN_ADDRESS:",
			"service api: environment variable LISTEN_ADDRESS is not the twin of any api flag",
		},
		"subcommand misspelt": {
			`["api", "migrate"]`, `["api", "migrations"]`,
			`unexpected argument "migrations"`,
		},
		"unknown flag in a command": {
			`["api", "serve"]`, `["api", "serve", "--listen=:8080"]`,
			"service api: --listen is not one of api's flags",
		},
		"bad value": {
			`NO_MIGRATE: "true"`, `NO_MIGRATE: "yes please"`,
			`NO_MIGRATE="yes please": must be true or false`,
		},
		"metrics published on the host": {
			"    ports:\n      - \"8080:8080\"\n", "    ports:\n      - \"8080:8080\"\n      - \"9091:9091\"\n",
			"service api: publishes /metrics (port 9091) on the host",
		},
		"metrics on loopback": {
			"METRICS_ADDR: 0.0.0.0:9091", "METRICS_ADDR: 127.0.0.1:9091",
			`service api: --metrics-addr: "127.0.0.1:9091" listens on loopback`,
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			runs := composeRuns(t, func(s string) string {
				require.Contains(t, s, tc.from)
				return strings.Replace(s, tc.from, tc.to, 1)
			})
			_, errs := deploycheck.CheckCompose(runs, b, apiPorts)
			require.ErrorContains(t, errors.Join(errs...), tc.want)
		})
	}
	t.Run("flag renamed in the code", func(t *testing.T) {
		t.Parallel()
		b := binary()
		require.Equal(t, "LISTEN_ADDR", b.Flags["--listen-addr"])
		delete(b.Flags, "--listen-addr")
		b.Flags["--listen-address"] = "LISTEN_ADDRESS"
		_, errs := deploycheck.CheckCompose(composeRuns(t, nil), b, apiPorts)
		require.ErrorContains(t, errors.Join(errs...), "service api: environment variable LISTEN_ADDR is not the twin of any api flag")
	})
}

func TestCheckArgsStopsAtParsing(t *testing.T) {
	t.Parallel()
	noEnv := func(string) string { return "" }
	require.NoError(t, checkArgs(nil, noEnv))
	require.NoError(t, checkArgs([]string{"serve", "--max-payload-bytes", "1024"}, noEnv))
	require.NoError(t, checkArgs([]string{"migrate"}, noEnv))
	require.ErrorContains(t, checkArgs([]string{"serv"}, noEnv), `unexpected argument "serv"`)
	require.ErrorContains(t, checkArgs([]string{"--db-max-conns", "many"}, noEnv), "must be an integer")
	require.ErrorContains(t, checkArgs(nil, func(k string) string { return map[string]string{"SHUTDOWN_TIMEOUT": "10"}[k] }), "SHUTDOWN_TIMEOUT")
	require.NoError(t, checkArgs([]string{"--session-key", strings.Repeat("k", 32)}, noEnv))
}

func TestShortSessionKeyIsRefused(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	env := map[string]string{"API_TOKEN": "t", "SESSION_KEY": strings.Repeat("k", 31)}
	err := run(ctx, nil, func(k string) string { return env[k] }, strings.NewReader(""), io.Discard, io.Discard)
	var ue *config.UsageError
	require.ErrorAs(t, err, &ue)
	require.Equal(t, "--session-key (SESSION_KEY): must be at least 32 bytes (or empty for a random key)", err.Error())
}

func TestBadTrustedProxiesAreRefused(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct{ value, want string }{
		{"10.0.0.0/8,not-a-cidr", `--trusted-proxies (TRUSTED_PROXIES): "not-a-cidr" is not a CIDR prefix or an address`},
		{"10.0.0.0/33", `--trusted-proxies (TRUSTED_PROXIES): "10.0.0.0/33" is not a CIDR prefix such as 10.0.0.0/8`},
	} {
		env := map[string]string{"API_TOKEN": "t", "TRUSTED_PROXIES": tc.value}
		err := run(ctx, nil, func(k string) string { return env[k] }, strings.NewReader(""), io.Discard, io.Discard)
		var ue *config.UsageError
		require.ErrorAs(t, err, &ue, tc.value)
		require.Equal(t, tc.want, err.Error())
	}
	env := map[string]string{"API_TOKEN": "t", "MAX_RECOVER_WINDOW": "0s"}
	err := run(ctx, nil, func(k string) string { return env[k] }, strings.NewReader(""), io.Discard, io.Discard)
	require.EqualError(t, err, "--max-recover-window (MAX_RECOVER_WINDOW): must be positive")
	for _, v := range []string{"0s", "900µs", "2m0s"} {
		env := map[string]string{"API_TOKEN": "t", "QUEUE_NOTIFY_INTERVAL": v}
		err := run(ctx, nil, func(k string) string { return env[k] }, strings.NewReader(""), io.Discard, io.Discard)
		require.EqualError(t, err, "--queue-notify-interval (QUEUE_NOTIFY_INTERVAL): must be from 1ms to 1m, got "+v, v)
	}
}
