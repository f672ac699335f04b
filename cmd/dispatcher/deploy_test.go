package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/deploy"
	"github.com/hookd/hookd/internal/config"
)

// binary describes the dispatcher to the manifest checks: its real flags,
// and a parse of a command line and environment by run itself.
func binary() deploy.Binary {
	fs, _ := newFlagSet(func(string) string { return "" }, io.Discard)
	return deploy.Binary{Name: "dispatcher", Package: "./cmd/dispatcher", Flags: fs.Names(), Check: checkArgs}
}

// checkArgs runs run on args with --help appended, so it parses the
// subcommand, the flags and the environment and stops there.
func checkArgs(args []string, getenv func(string) string) error {
	// Cancelled up front: were run ever to get past parsing, it stops at once.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out bytes.Buffer
	err := run(ctx, append(slices.Clone(args), "--help"), getenv, strings.NewReader(""), &out, io.Discard)
	switch {
	case errors.Is(err, config.ErrHelp):
		return nil
	case err == nil:
		return errors.New("run did not stop at --help")
	}
	return err
}

func loadManifests(t *testing.T) (compose string, df *deploy.Dockerfile) {
	t.Helper()
	b, err := os.ReadFile("../../docker-compose.yml")
	require.NoError(t, err)
	df, err = deploy.LoadDockerfile("../../Dockerfile")
	require.NoError(t, err)
	return string(b), df
}

func TestComposeAndDockerfileUseRealFlags(t *testing.T) {
	t.Parallel()
	compose, df := loadManifests(t)
	c, err := deploy.ParseCompose([]byte(compose))
	require.NoError(t, err)

	services, errs := deploy.CheckCompose(c, df, binary())
	require.NoError(t, errors.Join(errs...))
	require.Equal(t, []string{"dispatcher"}, services)
	require.NoError(t, errors.Join(deploy.CheckDockerfile(df, binary())...))
}

func TestManifestCheckFailsOnRenames(t *testing.T) {
	t.Parallel()
	compose, df := loadManifests(t)

	t.Run("environment variable renamed in the manifest", func(t *testing.T) {
		t.Parallel()
		require.Contains(t, compose, "METRICS_ADDR: 0.0.0.0:9090")
		c, err := deploy.ParseCompose([]byte(strings.Replace(compose, "METRICS_ADDR: 0.0.0.0:9090", "METRICS_LISTEN: 0.0.0.0:9090", 1)))
		require.NoError(t, err)
		_, errs := deploy.CheckCompose(c, df, binary())
		require.ErrorContains(t, errors.Join(errs...), "service dispatcher: environment variable METRICS_LISTEN is not the twin of any dispatcher flag")
	})
	t.Run("flag renamed in the code", func(t *testing.T) {
		t.Parallel()
		c, err := deploy.ParseCompose([]byte(compose))
		require.NoError(t, err)
		b := binary()
		require.Equal(t, "METRICS_ADDR", b.Flags["--metrics-addr"])
		delete(b.Flags, "--metrics-addr")
		b.Flags["--metrics-listen"] = "METRICS_LISTEN"
		_, errs := deploy.CheckCompose(c, df, b)
		require.ErrorContains(t, errors.Join(errs...), "service dispatcher: environment variable METRICS_ADDR is not the twin of any dispatcher flag")
	})
	t.Run("subcommand misspelt", func(t *testing.T) {
		t.Parallel()
		require.Contains(t, compose, `["dispatcher", "run"]`)
		c, err := deploy.ParseCompose([]byte(strings.Replace(compose, `["dispatcher", "run"]`, `["dispatcher", "serve"]`, 1)))
		require.NoError(t, err)
		_, errs := deploy.CheckCompose(c, df, binary())
		require.ErrorContains(t, errors.Join(errs...), `unexpected argument "serve"`)
	})
	t.Run("bad value", func(t *testing.T) {
		t.Parallel()
		c, err := deploy.ParseCompose([]byte(strings.Replace(compose, "METRICS_ADDR: 0.0.0.0:9090", "METRICS_ADDR: 0.0.0.0:9090\n      WORKERS: lots", 1)))
		require.NoError(t, err)
		_, errs := deploy.CheckCompose(c, df, binary())
		require.ErrorContains(t, errors.Join(errs...), `WORKERS="lots": must be an integer`)
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
