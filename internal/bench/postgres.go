package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookd/hookd/internal/pgcluster"
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

// cluster is the bench's private PostgreSQL cluster (internal/pgcluster)
// with the service roles, the template every scenario's database is cloned
// from, and an admin pool.
type cluster struct {
	pg      *pgcluster.Cluster
	logPath string
	logger  *slog.Logger

	admin   *pgxpool.Pool // the postgres database, as postgres
	version string
}

// benchSettings are the bench cluster's settings over the test defaults:
// durable like a production server (the bench counts WAL flushes), query
// statistics, and every lock wait longer than lockWaitThreshold logged.
func benchSettings() []string {
	return []string{
		"fsync = on",
		"full_page_writes = on",
		"synchronous_commit = on",
		"shared_buffers = '512MB'",
		"shared_preload_libraries = 'pg_stat_statements'",
		"pg_stat_statements.max = 10000",
		"pg_stat_statements.track = top",
		"pg_stat_statements.track_utility = on",
		"log_lock_waits = on",
		fmt.Sprintf("deadlock_timeout = '%dms'", lockWaitThreshold.Milliseconds()),
		"log_line_prefix = '%m [%p] %d '",
		"log_min_messages = warning",
	}
}

// startCluster starts a private cluster on a free port on 127.0.0.1 and
// creates the service roles and the migrated template database every
// scenario's database is cloned from. bin empty finds the newest installed
// server; extra settings go after the bench's own.
func startCluster(ctx context.Context, bin string, logger *slog.Logger, extra ...string) (_ *cluster, err error) {
	pg, err := pgcluster.Start(ctx, pgcluster.Options{BinDir: bin, Settings: append(benchSettings(), extra...)})
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	c := &cluster{pg: pg, logPath: pg.LogPath(), logger: logger}
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
	logger.Info("postgres_started", slog.String("version", c.version), slog.Int("port", pg.Port()), slog.String("dir", pg.DataDir()))
	return c, nil
}

// url returns a connection URL for role on database db.
func (c *cluster) url(role, db string) string { return c.pg.URL(role, db) }

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

// connections names each server process by whose work it does
// (postgresConnection), by pid.
func (c *cluster) connections(ctx context.Context) (map[int]string, error) {
	rows, err := c.admin.Query(ctx, `SELECT pid, coalesce(backend_type, ''), coalesce(application_name, '') FROM pg_stat_activity`)
	if err != nil {
		return nil, fmt.Errorf("read pg_stat_activity: %w", err)
	}
	defer rows.Close()
	out := map[int]string{}
	for rows.Next() {
		var pid int
		var backendType, app string
		if err := rows.Scan(&pid, &backendType, &app); err != nil {
			return nil, fmt.Errorf("read pg_stat_activity: %w", err)
		}
		out[pid] = postgresConnection(backendType, app)
	}
	return out, rows.Err()
}

// postmasterPID returns the server's process id.
func (c *cluster) postmasterPID() int { return c.pg.PostmasterPID() }

// logSize returns the server log's current size, the offset a scenario's
// lock-wait scan starts from.
func (c *cluster) logSize() int64 {
	fi, err := os.Stat(c.logPath)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// stop stops the server (fast, so its last checkpoint is written out
// of any measurement) and removes its directory.
func (c *cluster) stop() {
	if c.admin != nil {
		c.admin.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.pg.Stop(ctx, "fast"); err != nil {
		c.logger.Warn("postgres_stop", slog.String("error", err.Error()))
	}
	if err := c.pg.Remove(); err != nil {
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
