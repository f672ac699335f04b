package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/cli"
)

// TestRun: main's run is the command line, with its exit codes.
func TestRun(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args       []string
		code       int
		out, inErr string
	}{
		{[]string{"--help"}, cli.ExitOK, "Usage:", ""},
		{[]string{"completion", "bash"}, cli.ExitOK, "bash completion", ""},
		{[]string{"bogus"}, cli.ExitUsage, "", `unknown command "bogus"`},
		{[]string{"endpoints", "list"}, cli.ExitError, "", "not logged in"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			// XDG_CONFIG_HOME and HOME point nowhere: no login file.
			dir := t.TempDir()
			getenv := func(k string) string {
				return map[string]string{"XDG_CONFIG_HOME": dir, "HOME": dir}[k]
			}
			err := run(context.Background(), tc.args, getenv, strings.NewReader(""), &stdout, &stderr)
			require.Equal(t, tc.code, cli.ExitCode(err, &stderr), "stderr: %s", stderr.String())
			require.Contains(t, stdout.String(), tc.out)
			require.Contains(t, stderr.String(), tc.inErr)
		})
	}
}

// TestRunReadsTheLoginFileOfItsEnvironment: the login file is found in
// the XDG_CONFIG_HOME run was given, not the process's.
func TestRunReadsTheLoginFileOfItsEnvironment(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "hookd"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "hookd", "config.json"),
		[]byte(`{"api":"http://127.0.0.1:1","token":"hkd_x"}`), 0o600))
	getenv := func(k string) string { return map[string]string{"XDG_CONFIG_HOME": dir}[k] }
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"event-types", "list"}, getenv, strings.NewReader(""), &stdout, &stderr)
	require.Equal(t, cli.ExitError, cli.ExitCode(err, &stderr))
	require.Contains(t, stderr.String(), "127.0.0.1:1", "the file's API was called")
}
