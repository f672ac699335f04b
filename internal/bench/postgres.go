package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookd/hookd/internal/store"
)

// Roles the services connect as, so pg_stat_statements (keyed by user and
// database) splits round trips between the api and the dispatchers, and the
// bench's own queries (as postgres) are never counted.
const (
	roleAPI        = "bench_api"
	roleDispatcher = "bench_dispatcher"
	templateDB     = "bench_template"
)

// lockWaitThreshold is the cluster's deadlock_timeout: with log_lock_waits on,
// every lock wait longer than this is logged with its duration.
const lockWaitThreshold = 10 * time.Millisecond

// cluster is a private PostgreSQL cluster in a temporary directory, owned by
// the postgres OS user when the bench runs as root (initdb refuses root).
type cluster struct {
	bin     string
	root    string // owned by the server's OS user: data/, server.log, the socket
	data    string
	logPath string
	port    int
	asUser  string // OS user the server runs as; empty for the current user
	logger  *slog.Logger

	admin   *pgxpool.Pool // the postgres database, as postgres
	version string
}

// findPGBin returns the newest /usr/lib/postgresql/<version>/bin holding
// initdb, or the directory of initdb on PATH.
func findPGBin() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return pgMajor(dirs[i]) > pgMajor(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", errors.New("find postgres: no initdb under /usr/lib/postgresql/*/bin or on PATH (set -pg-bin)")
}

func pgMajor(dir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return n
}

// startCluster runs initdb, configures and starts a cluster on a free port
// on 127.0.0.1, and creates the service roles and the migrated template
// database every scenario's database is cloned from.
func startCluster(ctx context.Context, bin, scratch string, logger *slog.Logger) (_ *cluster, err error) {
	c := &cluster{bin: bin, logger: logger}
	if os.Geteuid() == 0 {
		c.asUser = "postgres"
	}
	c.root = filepath.Join(scratch, "pg")
	c.data = filepath.Join(c.root, "data")
	c.logPath = filepath.Join(c.root, "server.log")
	if err := os.MkdirAll(c.root, 0o700); err != nil {
		return nil, fmt.Errorf("create cluster dir: %w", err)
	}
	if c.asUser != "" {
		u, err := user.Lookup(c.asUser)
		if err != nil {
			return nil, fmt.Errorf("look up %s user (initdb refuses root): %w", c.asUser, err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		// The server user must reach its directory through the scratch dir.
		for _, d := range []string{scratch, c.root} {
			if err := os.Chmod(d, 0o755); err != nil {
				return nil, fmt.Errorf("open cluster dir: %w", err)
			}
		}
		if err := os.Chown(c.root, uid, gid); err != nil {
			return nil, fmt.Errorf("chown cluster dir: %w", err)
		}
	}
	if out, err := c.cmd("initdb", "-D", c.data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %w\n%s", err, out)
	}
	if c.port, err = freePort(); err != nil {
		return nil, err
	}
	conf := fmt.Sprintf(`
# hookd bench: a private cluster on loopback.
listen_addresses = '127.0.0.1'
port = %d
unix_socket_directories = '%s'
max_connections = 300
shared_buffers = '512MB'
shared_preload_libraries = 'pg_stat_statements'
pg_stat_statements.max = 10000
pg_stat_statements.track = top
pg_stat_statements.track_utility = on
log_lock_waits = on
deadlock_timeout = '%dms'
log_line_prefix = '%%m [%%p] %%d '
log_min_messages = warning
`, c.port, c.root, lockWaitThreshold.Milliseconds())
	f, err := os.OpenFile(filepath.Join(c.data, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("open postgresql.conf: %w", err)
	}
	_, err = io.WriteString(f, conf)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("write postgresql.conf: %w", err)
	}
	if out, err := c.cmd("pg_ctl", "-D", c.data, "-l", c.logPath, "-w", "-t", "60", "start").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("pg_ctl start: %w\n%s\n%s", err, out, tail(c.logPath, 20))
	}
	defer func() {
		if err != nil {
			c.stop()
		}
	}()
	c.admin, err = store.OpenPool(ctx, store.PoolConfig{URL: c.url("postgres", "postgres"), MaxConns: 4, ApplicationName: "bench"})
	if err != nil {
		return nil, err
	}
	if err := c.admin.QueryRow(ctx, `SHOW server_version`).Scan(&c.version); err != nil {
		return nil, fmt.Errorf("server version: %w", err)
	}
	for _, q := range []string{
		`CREATE EXTENSION IF NOT EXISTS pg_stat_statements`,
		`CREATE ROLE ` + roleAPI + ` LOGIN SUPERUSER`,
		`CREATE ROLE ` + roleDispatcher + ` LOGIN SUPERUSER`,
		`CREATE DATABASE ` + templateDB,
	} {
		if _, err := c.admin.Exec(ctx, q); err != nil {
			return nil, fmt.Errorf("set up cluster: %s: %w", q, err)
		}
	}
	tmpl, err := store.OpenPool(ctx, store.PoolConfig{URL: c.url("postgres", templateDB), MaxConns: 2, ApplicationName: "bench"})
	if err != nil {
		return nil, err
	}
	defer tmpl.Close()
	if err := store.Migrate(ctx, tmpl, logger.With(slog.String("db", templateDB))); err != nil {
		return nil, fmt.Errorf("migrate template: %w", err)
	}
	if _, err := tmpl.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
		return nil, fmt.Errorf("create pg_stat_statements in the bench database: %w", err)
	}
	tmpl.Close()
	logger.Info("postgres_started", slog.String("version", c.version), slog.Int("port", c.port), slog.String("dir", c.root))
	return c, nil
}

// cmd returns a command running one of the server's programs as the
// server's OS user, in its own process group so a terminal's Ctrl-C reaches
// the bench (which stops the server) rather than the server directly.
func (c *cluster) cmd(program string, args ...string) *exec.Cmd {
	path := filepath.Join(c.bin, program)
	var cmd *exec.Cmd
	if c.asUser != "" {
		cmd = exec.Command("runuser", append([]string{"-u", c.asUser, "--", path}, args...)...)
	} else {
		cmd = exec.Command(path, args...)
	}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd
}

// url returns a connection URL for role on database db.
func (c *cluster) url(role, db string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", role, c.port, db)
}

// createDatabase clones the template into a new database and returns a
// small pool on it as postgres (the bench's own queries) and its oid.
func (c *cluster) createDatabase(ctx context.Context, name string) (*pgxpool.Pool, uint32, error) {
	if _, err := c.admin.Exec(ctx, `CREATE DATABASE `+name+` TEMPLATE `+templateDB); err != nil {
		return nil, 0, fmt.Errorf("create database %s: %w", name, err)
	}
	// Write out what earlier scenarios and the clone left dirty now, so a
	// checkpoint's I/O does not land in this scenario's measurement.
	if _, err := c.admin.Exec(ctx, `CHECKPOINT`); err != nil {
		return nil, 0, fmt.Errorf("checkpoint before %s: %w", name, err)
	}
	var oid uint32
	if err := c.admin.QueryRow(ctx, `SELECT oid FROM pg_database WHERE datname = $1`, name).Scan(&oid); err != nil {
		return nil, 0, fmt.Errorf("database oid: %w", err)
	}
	pool, err := store.OpenPool(ctx, store.PoolConfig{URL: c.url("postgres", name), MaxConns: 6, ApplicationName: "bench"})
	if err != nil {
		return nil, 0, err
	}
	return pool, oid, nil
}

// dropDatabase drops a scenario's database, ending its sessions.
func (c *cluster) dropDatabase(ctx context.Context, name string) error {
	if _, err := c.admin.Exec(ctx, `DROP DATABASE IF EXISTS `+name+` WITH (FORCE)`); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
}

// postmasterPID returns the server's process id, from postmaster.pid.
func (c *cluster) postmasterPID() int {
	b, err := os.ReadFile(filepath.Join(c.data, "postmaster.pid"))
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, _ := strconv.Atoi(strings.TrimSpace(line))
	return pid
}

// logSize returns the server log's current size, the offset a scenario's
// lock-wait scan starts from.
func (c *cluster) logSize() int64 {
	fi, err := os.Stat(c.logPath)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// stop stops the server (fast, then immediate) and removes its directory.
func (c *cluster) stop() {
	if c.admin != nil {
		c.admin.Close()
	}
	if out, err := c.cmd("pg_ctl", "-D", c.data, "-m", "fast", "-w", "-t", "30", "stop").CombinedOutput(); err != nil {
		c.logger.Warn("postgres_stop", slog.String("error", err.Error()), slog.String("output", strings.TrimSpace(string(out))))
		_ = c.cmd("pg_ctl", "-D", c.data, "-m", "immediate", "-w", "stop").Run()
	}
	if err := os.RemoveAll(c.root); err != nil {
		c.logger.Warn("postgres_remove", slog.String("error", err.Error()))
	}
}

// lockWait is one wait logged by log_lock_waits.
type lockWait struct {
	Ms       float64 `json:"ms"`
	Acquired bool    `json:"acquired"`
	Lock     string  `json:"lock"`
	Context  string  `json:"context,omitempty"`
}

var lockWaitRE = regexp.MustCompile(`^\S+ \S+ \S+ \[\d+\] (\S*) LOG:  process \d+ (acquired|still waiting for) (.+?) after ([0-9.]+) ms`)

// lockWaits returns the lock waits the server logged for database db from
// offset on: every wait longer than deadlock_timeout, with its duration
// ("acquired ... after") or its duration so far ("still waiting ... after").
func (c *cluster) lockWaits(db string, offset int64) ([]lockWait, error) {
	f, err := os.Open(c.logPath)
	if err != nil {
		return nil, fmt.Errorf("open server log: %w", err)
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return nil, fmt.Errorf("seek server log: %w", err)
	}
	var out []lockWait
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	last := -1
	for sc.Scan() {
		line := sc.Text()
		if m := lockWaitRE.FindStringSubmatch(line); m != nil {
			last = -1
			if m[1] != db {
				continue
			}
			ms, _ := strconv.ParseFloat(m[4], 64)
			out = append(out, lockWait{Ms: ms, Acquired: m[2] == "acquired", Lock: m[3]})
			last = len(out) - 1
			continue
		}
		if last >= 0 && strings.Contains(line, "CONTEXT:  ") && out[last].Context == "" {
			_, ctxText, _ := strings.Cut(line, "CONTEXT:  ")
			out[last].Context = ctxText
		}
	}
	return out, sc.Err()
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// tail returns the last n lines of a file, for error messages.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// waitCtx sleeps for d or until ctx ends, reporting whether d elapsed.
func waitCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
