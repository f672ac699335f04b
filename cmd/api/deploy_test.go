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

// binary describes the api to the manifest checks: its real flags, and a
// parse of a command line and environment by run itself.
func binary() deploy.Binary {
	fs, _ := newFlagSet(func(string) string { return "" }, io.Discard)
	return deploy.Binary{Name: "api", Package: "./cmd/api", Flags: fs.Names(), Check: checkArgs}
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
	require.Equal(t, []string{"api", "migrate"}, services)
	require.NoError(t, errors.Join(deploy.CheckDockerfile(df, binary())...))
}

func TestManifestCheckFailsOnRenames(t *testing.T) {
	t.Parallel()
	compose, df := loadManifests(t)

	t.Run("environment variable renamed in the manifest", func(t *testing.T) {
		t.Parallel()
		require.Contains(t, compose, "LISTEN_ADDR:")
		c, err := deploy.ParseCompose([]byte(strings.Replace(compose, "LISTEN_ADDR:", "LISTEN_ADDRESS:", 1)))
		require.NoError(t, err)
		_, errs := deploy.CheckCompose(c, df, binary())
		require.ErrorContains(t, errors.Join(errs...), "service api: environment variable LISTEN_ADDRESS is not the twin of any api flag")
	})
	t.Run("flag renamed in the code", func(t *testing.T) {
		t.Parallel()
		c, err := deploy.ParseCompose([]byte(compose))
		require.NoError(t, err)
		b := binary()
		require.Equal(t, "LISTEN_ADDR", b.Flags["--listen-addr"])
		delete(b.Flags, "--listen-addr")
		b.Flags["--listen-address"] = "LISTEN_ADDRESS"
		_, errs := deploy.CheckCompose(c, df, b)
		require.ErrorContains(t, errors.Join(errs...), "service api: environment variable LISTEN_ADDR is not the twin of any api flag")
	})
	t.Run("subcommand misspelt", func(t *testing.T) {
		t.Parallel()
		require.Contains(t, compose, `["api", "migrate"]`)
		c, err := deploy.ParseCompose([]byte(strings.Replace(compose, `["api", "migrate"]`, `["api", "migrations"]`, 1)))
		require.NoError(t, err)
		_, errs := deploy.CheckCompose(c, df, binary())
		require.ErrorContains(t, errors.Join(errs...), `unexpected argument "migrations"`)
	})
	t.Run("unknown flag in a command", func(t *testing.T) {
		t.Parallel()
		c, err := deploy.ParseCompose([]byte(strings.Replace(compose, `["api", "serve"]`, `["api", "serve", "--listen=:8080"]`, 1)))
		require.NoError(t, err)
		_, errs := deploy.CheckCompose(c, df, binary())
		require.ErrorContains(t, errors.Join(errs...), "service api: --listen is not one of api's flags")
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
