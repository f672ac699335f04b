// Package pgcluster runs private PostgreSQL clusters for tests and the
// benchmark: initdb into a temporary directory, a free port on 127.0.0.1,
// settings of its own, and removal at the end. A server this project did not
// start is never stopped, restarted or reconfigured by it.
//
// Each cluster has a watchdog: a copy of the current executable that waits
// for this process to exit, however it exits (a test binary killed by its
// timeout skips every cleanup), and then stops the cluster and deletes its
// directory. Clusters whose owner and watchdog are both gone (a SIGKILL of
// the whole process group) are reaped by the next Start.
package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// DirPrefix names the temporary directories of private clusters, so a later
// run can find the ones an aborted run left behind.
const DirPrefix = "hookd-pg-"

// DefaultSettings are the postgresql.conf lines every cluster gets, before
// Options.Settings: loopback TCP only and no socket file, connections for
// the end-to-end suite (several api and dispatcher processes, each with a
// pool), and no flushes to disk, which a Postgres stop or crash (unlike an
// OS crash) never needs.
var DefaultSettings = []string{
	"listen_addresses = '127.0.0.1'",
	"unix_socket_directories = ''",
	"max_connections = 300",
	"fsync = off",
	"full_page_writes = off",
	"synchronous_commit = off",
}

// Options configures a cluster.
type Options struct {
	// BinDir holds initdb, pg_ctl and postgres; empty finds the newest
	// installed server (BinDir()).
	BinDir string
	// Settings are postgresql.conf lines appended after DefaultSettings: a
	// later line overrides an earlier one.
	Settings []string
}

// Cluster is one private cluster.
type Cluster struct {
	port  int
	dir   string // data/, postgres.log, owner.pid
	bin   string
	runAs bool // run PostgreSQL's programs as the postgres user
	uid   int
	gid   int

	mu       sync.Mutex
	up       bool
	removed  bool
	watchdog *exec.Cmd
	lifeline *os.File // its stdin's write end: closing it (or exiting) fires it
}

// Start initdb's a cluster in a new temporary directory and starts it on a
// free port. It fails when PostgreSQL's server programs are not installed.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	Reap()
	bin := opts.BinDir
	if bin == "" {
		if bin, err = BinDir(); err != nil {
			return nil, err
		}
	}
	c := &Cluster{bin: bin, runAs: os.Geteuid() == 0}
	if c.runAs {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root needs a postgres user to own the cluster (initdb refuses root): %w", err)
		}
		c.uid, _ = strconv.Atoi(u.Uid)
		c.gid, _ = strconv.Atoi(u.Gid)
	}
	if c.dir, err = os.MkdirTemp("", DirPrefix); err != nil {
		return nil, fmt.Errorf("cluster dir: %w", err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.Remove())
		}
	}()
	if err := os.WriteFile(filepath.Join(c.dir, "owner.pid"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return nil, fmt.Errorf("cluster dir: %w", err)
	}
	if c.runAs {
		if err := os.Chown(c.dir, c.uid, c.gid); err != nil {
			return nil, fmt.Errorf("cluster dir: %w", err)
		}
	}
	if err := c.startWatchdog(); err != nil {
		return nil, err
	}
	if out, err := c.pg(ctx, "initdb", "-D", c.DataDir(), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync"); err != nil {
		return nil, fmt.Errorf("initdb: %w\n%s", err, out)
	}
	conf := "\n# Added by internal/pgcluster: a private cluster for tests.\n" +
		strings.Join(DefaultSettings, "\n") + "\n" + strings.Join(opts.Settings, "\n") + "\n"
	f, err := os.OpenFile(filepath.Join(c.DataDir(), "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err == nil {
		_, err = io.WriteString(f, conf)
		err = errors.Join(err, f.Close())
	}
	if err != nil {
		return nil, fmt.Errorf("write postgresql.conf: %w", err)
	}
	// A free port can be taken between the probe and the bind: try a few.
	for try := 0; ; try++ {
		c.port, err = freePort()
		if err == nil {
			err = c.Start(ctx)
		}
		if err == nil || try == 2 {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Port is the port the cluster listens on at 127.0.0.1.
func (c *Cluster) Port() int { return c.port }

// AdminURL is the URL of the maintenance database as postgres.
func (c *Cluster) AdminURL() string { return c.URL("postgres", "postgres") }

// URL is the URL of database db as role (trust authentication).
func (c *Cluster) URL(role, db string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", role, c.port, db)
}

// DataDir is the cluster's data directory.
func (c *Cluster) DataDir() string { return filepath.Join(c.dir, "data") }

// LogPath is the server log.
func (c *Cluster) LogPath() string { return filepath.Join(c.dir, "postgres.log") }

// Log returns the server log.
func (c *Cluster) Log() string {
	b, _ := os.ReadFile(c.LogPath())
	return string(b)
}

// Running reports whether the cluster was started and not stopped since.
func (c *Cluster) Running() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.up
}

// Start starts a stopped cluster on its port and waits until it accepts
// connections.
func (c *Cluster) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.up {
		return nil
	}
	if out, err := c.pg(ctx, "pg_ctl", "-D", c.DataDir(), "-l", c.LogPath(),
		"-o", "-p "+strconv.Itoa(c.port), "-w", "-t", "60", "start"); err != nil {
		return fmt.Errorf("pg_ctl start on port %d: %w\n%s\n%s", c.port, err, out, lastLines(c.Log(), 10))
	}
	c.up = true
	return nil
}

// Stop stops the cluster: mode "fast" rolls back open transactions and
// keeps everything committed; "immediate" is a crash of the server process
// (no shutdown checkpoint, crash recovery on the next start).
func (c *Cluster) Stop(ctx context.Context, mode string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.up {
		return nil
	}
	if out, err := c.pg(ctx, "pg_ctl", "-D", c.DataDir(), "-m", mode, "-w", "-t", "60", "stop"); err != nil {
		return fmt.Errorf("pg_ctl stop -m %s: %w\n%s", mode, err, out)
	}
	c.up = false
	return nil
}

// Freeze stops every process of the cluster with SIGSTOP: the server keeps
// its connections open and answers nothing, as a stalled disk or a paused
// VM does. Thaw resumes it.
func (c *Cluster) Freeze() error { return signalAll(c.DataDir(), syscall.SIGSTOP) }

// Thaw resumes a frozen cluster with SIGCONT.
func (c *Cluster) Thaw() error { return signalAll(c.DataDir(), syscall.SIGCONT) }

// PostmasterPID is the server's process id, 0 when it does not run.
func (c *Cluster) PostmasterPID() int { return postmasterPID(c.DataDir()) }

// Remove stops the cluster if it runs (thawing it first: a stopped process
// does not act on pg_ctl's signal), deletes its directory and retires its
// watchdog. It is safe to call more than once.
func (c *Cluster) Remove() error {
	c.mu.Lock()
	if c.removed {
		c.mu.Unlock()
		return nil
	}
	c.removed = true
	c.mu.Unlock()
	if c.Running() {
		_ = c.Thaw()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := c.Stop(ctx, "immediate")
	err = errors.Join(err, os.RemoveAll(c.dir))
	if c.lifeline != nil {
		_ = c.lifeline.Close()
		_ = c.watchdog.Wait()
	}
	return err
}

// pg runs one of PostgreSQL's programs, as the postgres user when this
// process is root.
func (c *Cluster) pg(ctx context.Context, program string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, program), args...)
	cmd.SysProcAttr = c.sysProcAttr()
	cmd.Dir = c.dir
	cmd.Env = []string{"PATH=" + c.bin + ":/usr/bin:/bin", "LC_ALL=C"}
	return cmd.CombinedOutput()
}

// sysProcAttr runs a program as the cluster's owner, in its own process
// group: the postmaster outlives pg_ctl, and signals meant for this
// process's group (a terminal's Ctrl-C) must not reach it directly.
func (c *Cluster) sysProcAttr() *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true}
	if c.runAs {
		a.Credential = &syscall.Credential{Uid: uint32(c.uid), Gid: uint32(c.gid)}
	}
	return a
}

// watchdogEnv names the cluster directory a watchdog copy of the
// executable guards; watchdogBinEnv the server programs it stops it with.
const (
	watchdogEnv    = "HOOKD_PGCLUSTER_WATCHDOG"
	watchdogBinEnv = "HOOKD_PGCLUSTER_BIN"
	// watchdogKeepEnv: a byte on the lifeline means its owner let the
	// watchdog go and will clean up itself.
	watchdogKeepEnv = "HOOKD_PGCLUSTER_KEEP"
)

// A copy of the executable started as a watchdog does only that, before any
// test or main runs.
func init() {
	if dir := os.Getenv(watchdogEnv); dir != "" {
		released := WaitForParent()
		if released && os.Getenv(watchdogKeepEnv) != "" {
			os.Exit(0)
		}
		c := &Cluster{dir: dir, bin: os.Getenv(watchdogBinEnv)}
		c.runAs = os.Geteuid() == 0
		if c.runAs {
			if u, err := user.Lookup("postgres"); err == nil {
				c.uid, _ = strconv.Atoi(u.Uid)
				c.gid, _ = strconv.Atoi(u.Gid)
			}
		}
		removeDir(c)
		os.Exit(0)
	}
}

// RemoveOnExit starts a watchdog that deletes dir (stopping the cluster in
// it first, if one runs there) when this process exits, however it exits.
// release retires the watchdog without it touching dir.
func RemoveOnExit(dir string) (release func(), err error) {
	cmd, lifeline, err := Watchdog(map[string]string{watchdogEnv: dir, watchdogKeepEnv: "1"})
	if err != nil {
		return nil, err
	}
	return func() {
		_, _ = lifeline.Write([]byte{1}) // keep: this process cleans up itself
		_ = lifeline.Close()
		_ = cmd.Wait()
	}, nil
}

func (c *Cluster) startWatchdog() error {
	cmd, lifeline, err := Watchdog(map[string]string{watchdogEnv: c.dir, watchdogBinEnv: c.bin})
	if err != nil {
		return err
	}
	c.watchdog, c.lifeline = cmd, lifeline
	return nil
}

// Watchdog starts a copy of this executable with env added to its
// environment, in its own process group, its stdin the read end of a pipe
// whose write end (returned) this process holds: the copy's WaitForParent
// returns when this process closes it or exits in any way. The copy must
// recognise env in an init function and never reach main.
func Watchdog(env map[string]string) (*exec.Cmd, *os.File, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, nil, fmt.Errorf("watchdog: %w", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, fmt.Errorf("watchdog: %w", err)
	}
	defer r.Close()
	cmd := exec.Command(self)
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdin = r // an *os.File: no copying goroutine
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = w.Close()
		return nil, nil, fmt.Errorf("watchdog: %w", err)
	}
	return cmd, w, nil
}

// WaitForParent blocks, in a watchdog, until the process that started it
// exits or closes the lifeline, and reports whether the parent wrote on it
// first (let it go). Interrupts are ignored meanwhile: the cleanup must run.
func WaitForParent() (released bool) {
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGPIPE)
	n, _ := io.Copy(io.Discard, os.Stdin)
	return n > 0
}

// removeDir stops the cluster in dir, if its postmaster runs, and deletes
// the directory.
func removeDir(c *Cluster) {
	data := c.DataDir()
	if pm := postmasterPID(data); pm > 0 {
		_ = signalAll(data, syscall.SIGCONT)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if c.bin != "" {
			_, _ = c.pg(ctx, "pg_ctl", "-D", data, "-m", "immediate", "-w", "-t", "20", "stop")
		}
		cancel()
		if syscall.Kill(pm, 0) == nil {
			_ = syscall.Kill(pm, syscall.SIGQUIT) // immediate shutdown
			waitGone(pm, 10*time.Second)
		}
	}
	_ = os.RemoveAll(c.dir)
}

// waitGone polls until process pid is gone or d passed: a process that is
// not our child offers nothing to wait on.
func waitGone(pid int, d time.Duration) {
	deadline := time.Now().Add(d)
	for syscall.Kill(pid, 0) == nil && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
}

// Reap stops and removes private clusters whose owning process is gone and
// whose watchdog did not get to it.
func Reap() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), DirPrefix+"*"))
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, "owner.pid"))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid == os.Getpid() || !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			continue // unreadable, ours, or its owner is alive
		}
		c := &Cluster{dir: dir}
		if bin, err := BinDir(); err == nil {
			c.bin = bin
		}
		if c.runAs = os.Geteuid() == 0; c.runAs {
			if u, err := user.Lookup("postgres"); err == nil {
				c.uid, _ = strconv.Atoi(u.Uid)
				c.gid, _ = strconv.Atoi(u.Gid)
			}
		}
		removeDir(c)
	}
}

// BinDir finds PostgreSQL's server programs: the newest
// /usr/lib/postgresql/*/bin, else the directory of initdb on PATH.
func BinDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int {
		va, _ := strconv.Atoi(filepath.Base(filepath.Dir(a)))
		vb, _ := strconv.Atoi(filepath.Base(filepath.Dir(b)))
		return vb - va
	})
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", errors.New("PostgreSQL's server programs (initdb, pg_ctl) are not installed: run deploy/test-deps.sh or apt-get install postgresql")
}

func postmasterPID(dataDir string) int {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, _ := strconv.Atoi(strings.TrimSpace(line))
	return pid
}

// signalAll sends sig to the postmaster and then to each of its children.
func signalAll(dataDir string, sig syscall.Signal) error {
	pm := postmasterPID(dataDir)
	if pm <= 0 {
		return errors.New("no postmaster.pid")
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

// WatchdogPID is the process id of the cluster's watchdog.
func (c *Cluster) WatchdogPID() int {
	if c.watchdog == nil {
		return 0
	}
	return c.watchdog.Process.Pid
}
