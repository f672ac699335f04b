package deploy_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTestDepsInstallsWhatTheTestsNeed keeps deploy/test-deps.sh (run by
// .ci/run and make test) whole: it parses, and it starts PostgreSQL with
// pg_ctlcluster, installs it, Chromium and promtool when they are missing,
// and raises max_connections for the end-to-end tests. A fresh machine has
// none of the tools, so a script that lost a step fails CI there, not here;
// this test fails here.
func TestTestDepsInstallsWhatTheTestsNeed(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("bash", "-n", "test-deps.sh").CombinedOutput()
	require.NoError(t, err, "bash -n test-deps.sh: %s", out)

	b, err := os.ReadFile("test-deps.sh")
	require.NoError(t, err)
	script := string(b)
	for _, step := range []string{
		"pg_ctlcluster --skip-systemctl-redirect",
		"apt-get install -y -qq postgresql",
		"apt-get install -y -qq chromium",
		"apt-get install -y -qq --no-install-recommends prometheus",
		"command -v promtool",
		"ALTER SYSTEM SET max_connections",
	} {
		require.Contains(t, script, step)
	}

	ci, err := os.ReadFile("../.ci/run")
	require.NoError(t, err)
	require.Contains(t, string(ci), "./deploy/test-deps.sh")
	require.Contains(t, string(ci), "make test")
	mk, err := os.ReadFile("../Makefile")
	require.NoError(t, err)
	require.True(t, strings.Contains(string(mk), "\t./deploy/test-deps.sh\n"), "make test runs deploy/test-deps.sh")
}
