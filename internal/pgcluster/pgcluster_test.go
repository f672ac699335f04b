package pgcluster_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/hookd/hookd/internal/pgcluster"
)

func TestMain(m *testing.M) {
	if os.Getenv(ownerEnv) != "" {
		os.Exit(runOwner())
	}
	goleak.VerifyTestMain(m)
}

func start(t *testing.T) *pgcluster.Cluster {
	t.Helper()
	c, err := pgcluster.Start(context.Background(), pgcluster.Options{Settings: []string{"work_mem = '8MB'"}})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Remove()) })
	return c
}

// TestStartGivesAPrivateClusterWithItsOwnSettings checks the settings a test
// cluster gets, that it lives in its own temporary directory on its own
// port, and that Remove stops it and deletes the directory.
func TestStartGivesAPrivateClusterWithItsOwnSettings(t *testing.T) {
	t.Parallel()
	c := start(t)
	require.NotEqual(t, 5432, c.Port())
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, c.AdminURL())
	require.NoError(t, err)
	defer conn.Close(ctx)
	for setting, want := range map[string]string{
		"max_connections":         "300",
		"fsync":                   "off",
		"listen_addresses":        "127.0.0.1",
		"unix_socket_directories": "",
		"work_mem":                "8MB", // Options.Settings
		"port":                    fmt.Sprint(c.Port()),
	} {
		var got string
		require.NoError(t, conn.QueryRow(ctx, `SELECT current_setting($1)`, setting).Scan(&got))
		require.Equal(t, want, got, setting)
	}
	var dataDir string
	require.NoError(t, conn.QueryRow(ctx, `SHOW data_directory`).Scan(&dataDir))
	require.Equal(t, c.DataDir(), dataDir)
	require.True(t, strings.HasPrefix(filepath.Base(filepath.Dir(dataDir)), pgcluster.DirPrefix), dataDir)

	pm := c.PostmasterPID()
	require.Positive(t, pm)
	require.NoError(t, c.Remove())
	require.False(t, c.Running())
	require.NoDirExists(t, filepath.Dir(dataDir))
	require.True(t, gone(pm), "postmaster %d still runs", pm)
}

// TestWatchdogRemovesTheClusterOfAKilledOwner kills a process that started
// a cluster (as a test binary killed by its timeout would be, skipping every
// cleanup): its watchdog stops the cluster and deletes its directory.
func TestWatchdogRemovesTheClusterOfAKilledOwner(t *testing.T) {
	t.Parallel()
	o := startOwner(t)
	require.NoError(t, o.cmd.Process.Kill())
	_ = o.cmd.Wait()
	require.Eventually(t, func() bool { return noDir(o.dir) && gone(o.postmaster) && noDir(o.extra) },
		time.Minute, 50*time.Millisecond, "the watchdogs left %s (postmaster %d) or %s", o.dir, o.postmaster, o.extra)
}

// TestRemoveOnExitReleased: a released watchdog leaves its directory to
// its owner.
func TestRemoveOnExitReleased(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	release, err := pgcluster.RemoveOnExit(dir)
	require.NoError(t, err)
	release() // returns once the watchdog exited
	require.DirExists(t, dir)
}

// TestReapRemovesClustersWhoseOwnerAndWatchdogAreGone kills an owner and its
// watchdog together: the next Start (Reap) removes what they left.
func TestReapRemovesClustersWhoseOwnerAndWatchdogAreGone(t *testing.T) {
	t.Parallel()
	o := startOwner(t)
	require.NoError(t, syscall.Kill(o.watchdog, syscall.SIGKILL))
	require.NoError(t, o.cmd.Process.Kill())
	_ = o.cmd.Wait()
	require.Eventually(t, func() bool { return gone(o.watchdog) }, time.Minute, 20*time.Millisecond)
	require.DirExists(t, o.dir, "nothing removed it yet")
	require.False(t, gone(o.postmaster))

	pgcluster.Reap()
	require.NoDirExists(t, o.dir)
	require.Eventually(t, func() bool { return gone(o.postmaster) }, time.Minute, 20*time.Millisecond)
}

// ownerEnv makes the test binary a cluster owner: it starts a cluster,
// prints its directory, postmaster and watchdog pids, and waits to be killed.
const ownerEnv = "HOOKD_PGCLUSTER_TEST_OWNER"

func runOwner() int {
	c, err := pgcluster.Start(context.Background(), pgcluster.Options{})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	extra, err := os.MkdirTemp("", "pgcluster-test-")
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	if _, err := pgcluster.RemoveOnExit(extra); err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println(filepath.Dir(c.DataDir()), c.PostmasterPID(), c.WatchdogPID(), extra)
	select {} // until killed
}

type owner struct {
	cmd                  *exec.Cmd
	dir                  string
	postmaster, watchdog int
	extra                string // a directory under RemoveOnExit
}

func startOwner(t *testing.T) *owner {
	t.Helper()
	self, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), ownerEnv+"=1")
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	o := &owner{cmd: cmd}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		pgcluster.Reap()
		if o.extra != "" {
			_ = os.RemoveAll(o.extra)
		}
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err, "owner: %q", line)
	_, err = fmt.Sscan(line, &o.dir, &o.postmaster, &o.watchdog, &o.extra)
	require.NoError(t, err, "owner: %q", line)
	require.DirExists(t, o.dir)
	return o
}

// gone reports whether pid no longer runs (a zombie counts as gone).
func gone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'Z'
}

func noDir(dir string) bool {
	_, err := os.Stat(dir)
	return errors.Is(err, os.ErrNotExist)
}
