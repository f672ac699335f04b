// Package storetest gives each test its own Postgres database, cloned from a
// template that holds every migration (River's and hookd's), and drops it when
// the test ends. Tests run against a real Postgres, never a mock.
//
// The server is named by TEST_DATABASE_URL (default
// postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable).
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
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookd/hookd/internal/store"
)

// templateLockKey serialises template creation across test processes.
const templateLockKey = 0x686f6f6b6474 // "hookdt"

// AdminURL returns the URL of the server's maintenance database.
func AdminURL() string {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
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

	tmpl, err := ensureTemplate(ctx)
	if err != nil {
		t.Fatalf("storetest: template: %v", err)
	}
	name := "hookd_t_" + randomSuffix()
	admin, err := pgx.Connect(ctx, AdminURL())
	if err != nil {
		t.Fatalf("storetest: connect: %v", err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, fmt.Sprintf(`CREATE DATABASE %s TEMPLATE %s`, name, tmpl)); err != nil {
		t.Fatalf("storetest: create database: %v", err)
	}
	dbURL, err := withDatabase(AdminURL(), name)
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
		conn, err := pgx.Connect(ctx, AdminURL())
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

// ensureTemplate returns the name of the migrated template database for the
// current migrations, creating it once per migration set.
func ensureTemplate(ctx context.Context) (string, error) {
	name, err := templateName()
	if err != nil {
		return "", err
	}
	admin, err := pgx.Connect(ctx, AdminURL())
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
	u, err := withDatabase(AdminURL(), building)
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
