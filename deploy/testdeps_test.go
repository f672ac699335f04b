package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTestDepsInstallsOnlyWhatIsMissing runs deploy/test-deps.sh (run by
// .ci/run and make test) against stand-ins: an apt-get that records its
// calls, and PostgreSQL's initdb, Chromium, jq, ip, promtool, PgBouncer, Node.js and npm
// present or absent. With everything present it installs nothing and says
// nothing; with everything absent it says why for each, then installs them
// all in one apt transaction, with the packages' services kept from
// starting. It never touches a PostgreSQL server: the tests run private
// clusters of their own.
func TestTestDepsInstallsOnlyWhatIsMissing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		present []string // stand-in programs on PATH
		node    string   // the major version the stand-in node prints
		want    []string // the run's events, in order
		fails   bool
	}{
		{
			name:    "everything installed",
			present: []string{"initdb", "chromium", "jq", "ip", "promtool", "pgbouncer", "node", "npm"},
		},
		{
			name: "fresh machine",
			want: []string{
				"say installing PostgreSQL's server programs",
				"say installing Chromium",
				"say installing jq",
				"say installing iproute2",
				"say installing promtool",
				"say installing PgBouncer",
				"say installing Node.js and npm",
				"apt-get update -qq",
				"apt-get install -y -qq --no-install-recommends postgresql postgresql-contrib chromium fonts-liberation jq iproute2 prometheus pgbouncer nodejs npm (services blocked)",
			},
		},
		{
			name:    "only Chromium missing",
			present: []string{"initdb", "jq", "ip", "promtool", "pgbouncer", "node", "npm"},
			want: []string{
				"say installing Chromium",
				"apt-get update -qq",
				"apt-get install -y -qq --no-install-recommends chromium fonts-liberation (services blocked)",
			},
		},
		{
			name:    "Node.js too old",
			present: []string{"initdb", "chromium", "jq", "ip", "promtool", "pgbouncer", "node", "npm"},
			node:    "18",
			want:    []string{"say Node.js v18 is too old"},
			fails:   true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			bin := filepath.Join(dir, "bin")
			require.NoError(t, os.Mkdir(bin, 0o755))
			events := filepath.Join(dir, "events")
			policy := filepath.Join(dir, "policy-rc.d")
			// The script's own needs from coreutils, and nothing else.
			for _, tool := range []string{"dirname", "chmod", "rm", "cat"} {
				p, err := exec.LookPath(tool)
				require.NoError(t, err)
				require.NoError(t, os.Symlink(p, filepath.Join(bin, tool)))
			}
			node := tc.node
			if node == "" {
				node = "20"
			}
			// The stand-in node answers -p with its major version and
			// --version with v and that; apt-get's nodejs brings one.
			nodeScript := "#!/bin/sh\n[ \"$1\" = --version ] && echo v" + node + " || echo " + node + "\n"
			writeScript(t, filepath.Join(bin, "apt-get"), `#!/bin/bash
blocked=""
[[ -x "`+policy+`" ]] && ! "`+policy+`" && blocked=" (services blocked)"
echo "apt-get $*$blocked" >>"`+events+`"
if [[ " $* " == *" nodejs "* ]]; then
	printf '%s' '`+nodeScript+`' >"`+filepath.Join(bin, "node")+`"
	chmod +x "`+filepath.Join(bin, "node")+`"
fi
`)
			for _, p := range tc.present {
				body := "#!/bin/sh\n"
				if p == "node" {
					body = nodeScript
				}
				writeScript(t, filepath.Join(bin, p), body)
			}
			bash, err := exec.LookPath("bash")
			require.NoError(t, err)
			cmd := exec.Command(bash, "test-deps.sh")
			cmd.Env = []string{
				"PATH=" + bin,
				"TEST_DEPS_PG_GLOB=" + filepath.Join(dir, "none", "*", "initdb"),
				"TEST_DEPS_POLICY_RC_D=" + policy,
				"TEST_DEPS_PGBOUNCER=" + filepath.Join(dir, "none", "pgbouncer"),
			}
			// The script's output and apt-get's record share one file,
			// so their order is the order of the run.
			f, err := os.OpenFile(events, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
			require.NoError(t, err)
			cmd.Stdout, cmd.Stderr = f, f
			err = cmd.Run()
			require.NoError(t, f.Close())
			got := readLines(t, events)
			if tc.fails {
				require.Error(t, err, "%q", got)
			} else {
				require.NoError(t, err, "%q", got)
			}
			require.Len(t, got, len(tc.want), "events: %q", got)
			for i, w := range tc.want {
				g := got[i]
				if rest, ok := strings.CutPrefix(g, "test-deps: "); ok {
					g = "say " + rest
				}
				require.True(t, strings.HasPrefix(g, w), "event %d: got %q, want %q", i, got[i], w)
			}
			require.NoFileExists(t, policy, "the policy-rc.d it added is removed")
		})
	}
}

func writeScript(t *testing.T, path, body string) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(body), 0o755))
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	if len(b) == 0 {
		return nil
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}
