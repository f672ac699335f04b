// Package storetest gives each test its own Postgres database, cloned from a
// template that holds every migration (River's and hookd's), and drops it when
// the test ends. Tests run against a real Postgres, never a mock.
//
// The server is a private cluster (internal/pgcluster) that the first test of
// a test binary starts and that stops and disappears when the binary exits,
// so the tests never depend on, nor change, a server they did not start.
// When TEST_DATABASE_URL names a server, that server is used as it is; the
// databases the tests create on it (the template included) are dropped when
// the last test binary using it exits.
package storetest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"runtime/debug"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookd/hookd/internal/pgcluster"
	"github.com/hookd/hookd/internal/store"
)

// Advisory locks on the server: templateLockKey serialises template
// creation across test binaries; every binary holds usersLockKey shared for
// its lifetime, so the cleanup after the last one can take it exclusively.
const (
	templateLockKey = 0x686f6f6b6474 // "hookdt"
	usersLockKey    = 0x686f6f6b6475 // "hookdu"
)

// testDatabases matches the names of the databases this package creates:
// per-test databases, templates and templates being built.
const testDatabases = `^hookd_(t|tmpl)_[0-9a-f]+(_build)?$`

// cleanupEnv carries the server URL to the watchdog copy of the test binary
// that drops the tests' databases once every test binary using it is gone.
const cleanupEnv = "HOOKD_STORETEST_CLEANUP"

var shared struct {
	once     sync.Once
	url      string
	err      error
	cluster  *pgcluster.Cluster // the private cluster; its watchdog removes it
	session  *pgx.Conn          // holds usersLockKey on a TEST_DATABASE_URL server
	lifeline *os.File           // the cleanup watchdog's stdin
}

// server returns the admin URL of the test server, starting the private
// cluster on first use.
func server() (string, error) {
	shared.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
			shared.url, shared.err = u, joinServer(ctx, u)
			return
		}
		c, err := pgcluster.Start(ctx, pgcluster.Options{})
		if err != nil {
			shared.err = fmt.Errorf("private cluster: %w", err)
			return
		}
		shared.cluster, shared.url = c, c.AdminURL()
	})
	return shared.url, shared.err
}

// joinServer registers this test binary as a user of a TEST_DATABASE_URL
// server and starts the watchdog that cleans up after it.
func joinServer(ctx context.Context, u string) error {
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return fmt.Errorf("connect to TEST_DATABASE_URL: %w", err)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock_shared($1)`, int64(usersLockKey)); err != nil {
		_ = conn.Close(ctx)
		return fmt.Errorf("lock: %w", err)
	}
	_, lifeline, err := pgcluster.Watchdog(map[string]string{cleanupEnv: u})
	if err != nil {
		_ = conn.Close(ctx)
		return err
	}
	shared.session, shared.lifeline = conn, lifeline
	return nil
}

// A copy of the test binary started as the cleanup watchdog does only that.
func init() {
	if u := os.Getenv(cleanupEnv); u != "" {
		pgcluster.WaitForParent()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := dropTestDatabases(ctx, u); err != nil {
			fmt.Fprintln(os.Stderr, "storetest cleanup:", err)
		}
		cancel()
		os.Exit(0)
	}
}

// dropTestDatabases drops every database this package created on the
// server at u, unless a test binary still uses the server: that one's
// cleanup does it when it exits.
func dropTestDatabases(ctx context.Context, u string) error {
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.Background())
	// A killed binary's sessions hold the lock until their backends
	// notice the closed connection, which a busy backend (one creating a
	// database) does only when its statement ends: ask again for a while
	// before deciding another binary uses the server.
	var alone bool
	for wait := time.NewTicker(100 * time.Millisecond); ; {
		if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, int64(usersLockKey)).Scan(&alone); err != nil {
			wait.Stop()
			return fmt.Errorf("lock: %w", err)
		}
		if alone {
			wait.Stop()
			break
		}
		select {
		case <-wait.C:
			continue
		case <-ctx.Done():
			wait.Stop()
			return nil
		}
	}
	rows, err := conn.Query(ctx, `SELECT datname FROM pg_database WHERE datname ~ $1`, testDatabases)
	if err != nil {
		return fmt.Errorf("list databases: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("list databases: %w", err)
	}
	for _, n := range names {
		if _, err := conn.Exec(ctx, `DROP DATABASE IF EXISTS `+pgx.Identifier{n}.Sanitize()+` WITH (FORCE)`); err != nil {
			return fmt.Errorf("drop %s: %w", n, err)
		}
	}
	return nil
}

// AdminURL returns the URL of the test server's maintenance database,
// starting the private cluster on first use. It panics when no server can
// be had (PostgreSQL's server programs missing, TEST_DATABASE_URL not
// answering): every test that needs the database would fail anyway.
func AdminURL() string {
	u, err := server()
	if err != nil {
		panic("storetest: " + err.Error())
	}
	return u
}

// DB is one test's database.
type DB struct {
	// Name is the database name.
	Name string
	// URL connects to it.
	URL string
	// Pool is a small pool on it, closed at cleanup.
	Pool *pgxpool.Pool
}

// New creates a fresh, fully migrated database for t and drops it when t ends.
func New(t testing.TB) *DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	serverURL, err := server()
	if err != nil {
		t.Fatalf("storetest: %v", err)
	}
	tmpl, err := ensureTemplate(ctx, serverURL)
	if err != nil {
		t.Fatalf("storetest: template: %v", err)
	}
	name := "hookd_t_" + randomSuffix()
	admin, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		t.Fatalf("storetest: connect: %v", err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, fmt.Sprintf(`CREATE DATABASE %s TEMPLATE %s`, name, tmpl)+copyStrategy(admin.PgConn().ParameterStatus("server_version"))); err != nil {
		t.Fatalf("storetest: create database: %v", err)
	}
	dbURL, err := withDatabase(serverURL, name)
	if err != nil {
		t.Fatalf("storetest: %v", err)
	}
	pool, err := store.OpenPool(ctx, store.PoolConfig{URL: dbURL, MaxConns: 8, ApplicationName: "storetest"})
	if err != nil {
		t.Fatalf("storetest: open pool: %v", err)
	}
	t.Cleanup(func() {
		pool.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		conn, err := pgx.Connect(ctx, serverURL)
		if err != nil {
			t.Errorf("storetest: connect for drop: %v", err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, fmt.Sprintf(`DROP DATABASE IF EXISTS %s WITH (FORCE)`, name)); err != nil {
			t.Errorf("storetest: drop database: %v", err)
		}
	})
	return &DB{Name: name, URL: dbURL, Pool: pool}
}

// copyStrategy is the STRATEGY clause of a test database's CREATE
// DATABASE. FILE_COPY copies the template's files; PostgreSQL 15's default,
// WAL_LOG, writes every block of them to the WAL, which for a template
// that is almost all system catalogs (about 10 MB) cost the server about
// twice the CPU: internal/api's tests under the race detector, alone,
// took 72-75 s and 73-84 CPU-seconds of PostgreSQL with WAL_LOG, 53-60 s
// and 40-56 with FILE_COPY. Its checkpoint is cheap on the private
// cluster (fsync off). Servers before 15 know one way only, FILE_COPY's,
// and no STRATEGY clause. serverVersion is the server's server_version.
func copyStrategy(serverVersion string) string {
	var version int
	if _, err := fmt.Sscanf(serverVersion, "%d", &version); err != nil || version < 15 {
		return ""
	}
	return " STRATEGY FILE_COPY"
}

// ensureTemplate returns the name of the migrated template database for the
// current migrations, creating it once per migration set.
func ensureTemplate(ctx context.Context, adminURL string) (string, error) {
	name, err := templateName()
	if err != nil {
		return "", err
	}
	admin, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return "", fmt.Errorf("connect: %w", err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, `SELECT pg_advisory_lock($1)`, int64(templateLockKey)); err != nil {
		return "", fmt.Errorf("lock: %w", err)
	}
	defer func() {
		_, _ = admin.Exec(context.Background(), `SELECT pg_advisory_unlock($1)`, int64(templateLockKey))
	}()

	var exists bool
	if err := admin.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return "", fmt.Errorf("look up template: %w", err)
	}
	if exists {
		return name, nil
	}
	building := name + "_build"
	if _, err := admin.Exec(ctx, fmt.Sprintf(`DROP DATABASE IF EXISTS %s WITH (FORCE)`, building)); err != nil {
		return "", fmt.Errorf("drop stale build: %w", err)
	}
	if _, err := admin.Exec(ctx, fmt.Sprintf(`CREATE DATABASE %s`, building)); err != nil {
		return "", fmt.Errorf("create template: %w", err)
	}
	u, err := withDatabase(adminURL, building)
	if err != nil {
		return "", err
	}
	pool, err := store.OpenPool(ctx, store.PoolConfig{URL: u, MaxConns: 2})
	if err != nil {
		return "", err
	}
	err = store.Migrate(ctx, pool, nil)
	pool.Close()
	if err != nil {
		return "", fmt.Errorf("migrate template: %w", err)
	}
	if _, err := admin.Exec(ctx, fmt.Sprintf(`ALTER DATABASE %s RENAME TO %s`, building, name)); err != nil {
		return "", fmt.Errorf("publish template: %w", err)
	}
	// Templates of older migration sets are dead weight now.
	rows, err := admin.Query(ctx, `SELECT datname FROM pg_database WHERE datname LIKE 'hookd_tmpl_%' AND datname <> $1`, name)
	if err == nil {
		old, _ := pgx.CollectRows(rows, pgx.RowTo[string])
		for _, o := range old {
			_, _ = admin.Exec(ctx, fmt.Sprintf(`DROP DATABASE IF EXISTS %s`, pgx.Identifier{o}.Sanitize()))
		}
	}
	return name, nil
}

// templateName hashes the migrations and the River version, so a changed
// migration set gets a new template.
func templateName() (string, error) {
	all, err := store.Migrations()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, m := range all {
		fmt.Fprintf(h, "%d\n%s\n", m.Version, m.SQL)
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/riverqueue/river" {
				fmt.Fprintln(h, d.Version)
			}
		}
	}
	return "hookd_tmpl_" + hex.EncodeToString(h.Sum(nil))[:16], nil
}

func withDatabase(rawURL, name string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", fmt.Errorf("parse TEST_DATABASE_URL: %w", err)
	}
	u.Path = "/" + name
	return u.String(), nil
}

func randomSuffix() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// DropPartitions detaches and drops the time partitions of messages,
// payloads, deliveries and attempts (those with a lower bound; with legacy
// also the ones spanning every past time), so a test starts from the
// partitions it makes itself.
func (db *DB) DropPartitions(t testing.TB, legacy bool) {
	t.Helper()
	ctx := context.Background()
	rows, err := db.Pool.Query(ctx, `SELECT parent, name FROM hookd_partitions WHERE $1 OR from_at IS NOT NULL ORDER BY parent, to_at`, legacy)
	if err != nil {
		t.Fatalf("storetest: list partitions: %v", err)
	}
	type partition struct{ Parent, Name string }
	parts, err := pgx.CollectRows(rows, pgx.RowToStructByPos[partition])
	if err != nil {
		t.Fatalf("storetest: list partitions: %v", err)
	}
	for _, p := range parts {
		sql := fmt.Sprintf(`ALTER TABLE %s DETACH PARTITION %s; DROP TABLE %s; DELETE FROM hookd_partitions WHERE name = '%s'`, p.Parent, p.Name, p.Name, p.Name)
		if _, err := db.Pool.Exec(ctx, sql); err != nil {
			t.Fatalf("storetest: drop partition %s: %v", p.Name, err)
		}
	}
}
