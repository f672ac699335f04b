package storetest_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/hookd/hookd/internal/pgcluster"
	"github.com/hookd/hookd/internal/store/storetest"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		os.Exit(runChild(mode))
	}
	goleak.VerifyTestMain(m)
}

// childEnv makes the test binary the child of TestNoDatabaseLeftOnTheServer:
// it creates a test database on TEST_DATABASE_URL and then exits ("finish")
// or waits to be killed ("hang").
const childEnv = "HOOKD_STORETEST_CHILD"

// childT is the child's testing.TB: storetest.New needs Helper, Fatalf,
// Errorf and Cleanup only.
type childT struct {
	testing.TB
	failed   bool
	cleanups []func()
}

func (c *childT) Helper() {}
func (c *childT) Fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}
func (c *childT) Errorf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	c.failed = true
}
func (c *childT) Cleanup(f func()) { c.cleanups = append(c.cleanups, f) }

func runChild(mode string) int {
	t := &childT{}
	db := storetest.New(t)
	if err := db.Pool.Ping(context.Background()); err != nil {
		t.Fatalf("ping: %v", err)
	}
	if mode == "hang" {
		fmt.Println("created")
		select {} // until killed
	}
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
	if t.failed {
		return 1
	}
	fmt.Println("done")
	return 0
}

// TestNewGivesEachTestAFreshMigratedDatabase checks that a test's database
// has every migration and nothing another test wrote.
func TestNewGivesEachTestAFreshMigratedDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := storetest.New(t), storetest.New(t)
	require.NotEqual(t, a.Name, b.Name)
	_, err := a.Pool.Exec(ctx, `CREATE TABLE probe (n int)`)
	require.NoError(t, err)
	var absent bool
	require.NoError(t, b.Pool.QueryRow(ctx, `SELECT to_regclass('probe') IS NULL`).Scan(&absent))
	require.True(t, absent, "a table another test created")
	var n int
	require.NoError(t, b.Pool.QueryRow(ctx, `SELECT count(*) FROM deliveries`).Scan(&n), "hookd's migrations")
	require.Zero(t, n)
	require.NoError(t, b.Pool.QueryRow(ctx, `SELECT count(*) FROM river_job`).Scan(&n), "River's migrations")
}

// TestTheServerIsAPrivateCluster checks that without TEST_DATABASE_URL the
// tests run on a cluster of their own, not on a server at 5432, and that
// with it they run on the server it names.
func TestTheServerIsAPrivateCluster(t *testing.T) {
	t.Parallel()
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		require.Equal(t, u, storetest.AdminURL(), "TEST_DATABASE_URL is used as it is")
		return
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, storetest.AdminURL())
	require.NoError(t, err)
	defer conn.Close(ctx)
	var dataDir, port string
	require.NoError(t, conn.QueryRow(ctx, `SELECT current_setting('data_directory'), current_setting('port')`).Scan(&dataDir, &port))
	require.Contains(t, dataDir, "/"+pgcluster.DirPrefix)
	require.NotEqual(t, "5432", port)
}

// TestNoDatabaseLeftOnTheServer runs this test binary against a server
// named by TEST_DATABASE_URL, once to completion and once killed in the
// middle of a test (as a timeout kills it): neither leaves a database on
// the server.
func TestNoDatabaseLeftOnTheServer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, err := pgcluster.Start(ctx, pgcluster.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, srv.Remove()) })
	conn, err := pgx.Connect(ctx, srv.AdminURL())
	require.NoError(t, err)
	defer conn.Close(ctx)
	databases := func() []string {
		rows, err := conn.Query(ctx, `SELECT datname FROM pg_database WHERE datname NOT IN ('postgres', 'template0', 'template1') ORDER BY 1`)
		require.NoError(t, err)
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return names
	}
	self, err := os.Executable()
	require.NoError(t, err)
	child := func(mode string) *exec.Cmd {
		cmd := exec.Command(self)
		cmd.Env = append(os.Environ(), "TEST_DATABASE_URL="+srv.AdminURL(), childEnv+"="+mode)
		return cmd
	}

	out, err := child("finish").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "done")
	require.Eventually(t, func() bool { return len(databases()) == 0 }, time.Minute, 50*time.Millisecond,
		"left behind: %v", databases())

	cmd := child("hang")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	buf := make([]byte, 64)
	var seen strings.Builder
	for !strings.Contains(seen.String(), "created\n") {
		n, err := stdout.Read(buf)
		require.NoError(t, err, "child: %s", seen.String())
		seen.Write(buf[:n])
	}
	require.NotEmpty(t, databases(), "the child's databases exist while it runs")
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	require.Eventually(t, func() bool { return len(databases()) == 0 }, time.Minute, 50*time.Millisecond,
		"left behind by a killed test binary: %v", databases())
}
