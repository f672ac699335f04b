package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/store/storetest"
)

// clusterDirPrefix names the temporary directories of private clusters, so
// a later run can find the ones an aborted run left behind.
const clusterDirPrefix = "hookd-pg-"

// Cluster is a private PostgreSQL cluster on 127.0.0.1 for tests that stop,
// restart or crash Postgres: the shared server must never be restarted by a
// test. It lives in a temporary directory owned by the postgres user (initdb
// and postgres refuse to run as root) and is stopped and removed when the
// test ends, failed or not.
type Cluster struct {
	// Port is the port the cluster listens on at 127.0.0.1.
	Port int

	dir   string // temporary root: data/, postgres.log, owner.pid
	bin   string // directory of pg_ctl, initdb, postgres
	runAs bool   // run PostgreSQL's programs as the postgres user
	uid   int
	gid   int
	mu    sync.Mutex
	up    bool
}

// StartCluster initdb's a private cluster in a temporary directory, starts
// it on a free port and registers its removal with t.Cleanup. It fails the
// test when PostgreSQL's server binaries are not installed.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	reapAbandonedClusters()
	bin, err := pgBinDir()
	if err != nil {
		t.Fatalf("e2e: private cluster: %v", err)
	}
	c := &Cluster{bin: bin, runAs: os.Geteuid() == 0}
	if c.runAs {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("e2e: private cluster: running as root needs a postgres user to own the cluster: %v", err)
		}
		c.uid, _ = strconv.Atoi(u.Uid)
		c.gid, _ = strconv.Atoi(u.Gid)
	}
	c.dir, err = os.MkdirTemp("", clusterDirPrefix)
	if err != nil {
		t.Fatalf("e2e: private cluster: %v", err)
	}
	t.Cleanup(func() {
		if err := c.remove(); err != nil {
			t.Errorf("e2e: remove private cluster: %v", err)
		}
	})
	if err := os.WriteFile(filepath.Join(c.dir, "owner.pid"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		t.Fatalf("e2e: private cluster: %v", err)
	}
	if c.runAs {
		if err := os.Chown(c.dir, c.uid, c.gid); err != nil {
			t.Fatalf("e2e: private cluster: %v", err)
		}
	}
	if out, err := c.pg("initdb", "-D", c.dataDir(), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync"); err != nil {
		t.Fatalf("e2e: initdb: %v\n%s", err, out)
	}
	// Loopback TCP only and no socket file; fsync off only skips flushes to
	// disk, which a Postgres stop or crash (unlike an OS crash) never needs.
	conf := "\n# Added by internal/e2e.StartCluster\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = ''\n" +
		"max_connections = 200\nfsync = off\nfull_page_writes = off\n"
	f, err := os.OpenFile(filepath.Join(c.dataDir(), "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err == nil {
		_, err = f.WriteString(conf)
		err = errors.Join(err, f.Close())
	}
	if err != nil {
		t.Fatalf("e2e: private cluster config: %v", err)
	}
	// A free port can be taken between the probe and the bind: try a few.
	for try := 0; ; try++ {
		c.Port, err = freePort()
		if err == nil {
			err = c.start()
		}
		if err == nil {
			break
		}
		if try == 2 {
			t.Fatalf("e2e: start private cluster: %v", err)
		}
	}
	return c
}

// AdminURL is the URL of the cluster's maintenance database.
func (c *Cluster) AdminURL() string { return c.URL("postgres") }

// URL is the URL of database name on the cluster.
func (c *Cluster) URL(name string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.Port, name)
}

// NewDatabase creates a database on the cluster, applies every migration
// (hookd's and River's) and returns it with a small pool, closed when the
// test ends.
func (c *Cluster) NewDatabase(t testing.TB, name string) *storetest.DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin, err := pgx.Connect(ctx, c.AdminURL())
	if err != nil {
		t.Fatalf("e2e: connect to private cluster: %v", err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("e2e: create database %s: %v", name, err)
	}
	pool, err := store.OpenPool(ctx, store.PoolConfig{URL: c.URL(name), MaxConns: 8, ApplicationName: "e2e"})
	if err != nil {
		t.Fatalf("e2e: %v", err)
	}
	t.Cleanup(pool.Close)
	if err := store.Migrate(ctx, pool, nil); err != nil {
		t.Fatalf("e2e: migrate %s: %v", name, err)
	}
	return &storetest.DB{Name: name, URL: c.URL(name), Pool: pool}
}

// Stop stops the cluster in fast mode: open transactions are rolled back,
// clients disconnected, and everything committed is kept.
func (c *Cluster) Stop(t testing.TB) {
	t.Helper()
	if err := c.stop("fast"); err != nil {
		t.Fatalf("e2e: stop private cluster: %v", err)
	}
}

// Crash stops the cluster in immediate mode, as a power cut of the server
// process would: no shutdown checkpoint, crash recovery on the next start.
func (c *Cluster) Crash(t testing.TB) {
	t.Helper()
	if err := c.stop("immediate"); err != nil {
		t.Fatalf("e2e: crash private cluster: %v", err)
	}
}

// Start starts a stopped cluster on its port and waits until it accepts
// connections.
func (c *Cluster) Start(t testing.TB) {
	t.Helper()
	if err := c.start(); err != nil {
		t.Fatalf("e2e: start private cluster: %v", err)
	}
}

// Restart stops the cluster in fast mode and starts it again.
func (c *Cluster) Restart(t testing.TB) {
	t.Helper()
	c.Stop(t)
	c.Start(t)
}

// Freeze stops every process of the cluster with SIGSTOP: the server keeps
// its connections open and answers nothing, as a stalled disk or a paused
// VM does. Thaw resumes it.
func (c *Cluster) Freeze(t testing.TB) {
	t.Helper()
	if err := c.signalAll(syscall.SIGSTOP); err != nil {
		t.Fatalf("e2e: freeze private cluster: %v", err)
	}
}

// Thaw resumes a frozen cluster with SIGCONT.
func (c *Cluster) Thaw(t testing.TB) {
	t.Helper()
	if err := c.signalAll(syscall.SIGCONT); err != nil {
		t.Fatalf("e2e: thaw private cluster: %v", err)
	}
}

// signalAll sends sig to the postmaster and then to each of its children.
func (c *Cluster) signalAll(sig syscall.Signal) error {
	b, err := os.ReadFile(filepath.Join(c.dataDir(), "postmaster.pid"))
	if err != nil {
		return fmt.Errorf("read postmaster.pid: %w", err)
	}
	pm, err := strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0])
	if err != nil {
		return fmt.Errorf("parse postmaster.pid: %w", err)
	}
	if err := syscall.Kill(pm, sig); err != nil {
		return fmt.Errorf("signal postmaster %d: %w", pm, err)
	}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, st := range stats {
		b, err := os.ReadFile(st)
		if err != nil {
			continue // gone
		}
		// pid (comm) state ppid ...: comm may hold spaces, so split after ")".
		rest := string(b[strings.LastIndexByte(string(b), ')')+1:])
		var state string
		var ppid int
		if _, err := fmt.Sscan(rest, &state, &ppid); err != nil || ppid != pm {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(st)))
		_ = syscall.Kill(pid, sig)
	}
	return nil
}

// Running reports whether the cluster was started and not stopped since.
func (c *Cluster) Running() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.up
}

// Log returns the server log.
func (c *Cluster) Log() string {
	b, _ := os.ReadFile(filepath.Join(c.dir, "postgres.log"))
	return string(b)
}

func (c *Cluster) dataDir() string { return filepath.Join(c.dir, "data") }

func (c *Cluster) start() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.up {
		return nil
	}
	out, err := c.pg("pg_ctl", "-D", c.dataDir(), "-l", filepath.Join(c.dir, "postgres.log"),
		"-o", "-p "+strconv.Itoa(c.Port), "-w", "-t", "60", "start")
	if err != nil {
		return fmt.Errorf("pg_ctl start on port %d: %w\n%s\n%s", c.Port, err, out, lastLines(c.Log(), 10))
	}
	c.up = true
	return nil
}

func (c *Cluster) stop(mode string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.up {
		return nil
	}
	if out, err := c.pg("pg_ctl", "-D", c.dataDir(), "-m", mode, "-w", "-t", "60", "stop"); err != nil {
		return fmt.Errorf("pg_ctl stop -m %s: %w\n%s", mode, err, out)
	}
	c.up = false
	return nil
}

// remove stops the cluster if it runs (thawing it first: a stopped
// process does not act on pg_ctl's signal) and deletes its directory.
func (c *Cluster) remove() error {
	if c.Running() {
		_ = c.signalAll(syscall.SIGCONT)
	}
	err := c.stop("immediate")
	return errors.Join(err, os.RemoveAll(c.dir))
}

// pg runs one of PostgreSQL's programs, as the postgres user when this
// process is root.
func (c *Cluster) pg(program string, args ...string) ([]byte, error) {
	cmd := exec.Command(filepath.Join(c.bin, program), args...)
	if c.runAs {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(c.uid), Gid: uint32(c.gid)}}
	}
	// The postmaster outlives pg_ctl: keep it out of this process's
	// group so signals meant for the test's processes never reach it.
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.Dir = c.dir
	cmd.Env = []string{"PATH=" + c.bin + ":/usr/bin:/bin", "LC_ALL=C"}
	return cmd.CombinedOutput()
}

// pgBinDir finds PostgreSQL's server programs: the newest
// /usr/lib/postgresql/*/bin, else the directory of initdb on PATH.
func pgBinDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int {
		va, _ := strconv.Atoi(filepath.Base(filepath.Dir(a)))
		vb, _ := strconv.Atoi(filepath.Base(filepath.Dir(b)))
		return vb - va
	})
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "pg_ctl")); err == nil {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", errors.New("PostgreSQL's server programs (initdb, pg_ctl) are not installed: apt-get install postgresql")
}

// reapAbandonedClusters stops and removes private clusters whose test
// process is gone (a run killed by its timeout skips its cleanups).
func reapAbandonedClusters() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), clusterDirPrefix+"*"))
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, "owner.pid"))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid == os.Getpid() || !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			continue // unreadable, ours, or its owner is alive
		}
		if b, err := os.ReadFile(filepath.Join(dir, "data", "postmaster.pid")); err == nil {
			if pm, err := strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0]); err == nil && pm > 0 {
				_ = syscall.Kill(pm, syscall.SIGQUIT) // immediate shutdown
				deadline := time.Now().Add(10 * time.Second)
				for syscall.Kill(pm, 0) == nil && time.Now().Before(deadline) {
					time.Sleep(50 * time.Millisecond)
				}
			}
		}
		_ = os.RemoveAll(dir)
	}
}

// freePort returns a TCP port that was free on 127.0.0.1 a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
