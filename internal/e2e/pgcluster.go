package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookd/hookd/internal/pgcluster"
	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/store/storetest"
)

// Cluster is a private PostgreSQL cluster (internal/pgcluster) of one test,
// for tests that stop, restart, freeze or crash Postgres: the package's
// shared cluster, and any server a test did not start, are never restarted
// by a test. It is stopped and removed when the test ends, failed or not.
type Cluster struct {
	*pgcluster.Cluster
}

// StartCluster starts a private cluster for t and registers its removal
// with t.Cleanup. It fails the test when PostgreSQL's server programs are
// not installed. settings are postgresql.conf lines after the defaults.
func StartCluster(t testing.TB, settings ...string) *Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := pgcluster.Start(ctx, pgcluster.Options{Settings: settings})
	if err != nil {
		t.Fatalf("e2e: private cluster: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Remove(); err != nil {
			t.Errorf("e2e: remove private cluster: %v", err)
		}
	})
	return &Cluster{c}
}

// StartClusterOn starts a private cluster, as StartCluster does, that
// also listens on nw's bridge and lets its hosts in (trust, like
// loopback's clients).
func StartClusterOn(t testing.TB, nw *Net, settings ...string) *Cluster {
	t.Helper()
	c := StartCluster(t, append([]string{fmt.Sprintf("listen_addresses = '127.0.0.1,%s'", nw.Addr)}, settings...)...)
	hba := fmt.Sprintf("\n# Added by internal/e2e: the hosts of a test network.\nhost all all %s trust\n", nw.Prefix)
	f, err := os.OpenFile(filepath.Join(c.DataDir(), "pg_hba.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err == nil {
		_, err = f.WriteString(hba)
		err = errors.Join(err, f.Close())
	}
	if err != nil {
		t.Fatalf("e2e: write pg_hba.conf: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, c.AdminURL())
	if err != nil {
		t.Fatalf("e2e: connect to private cluster: %v", err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, `SELECT pg_reload_conf()`); err != nil {
		t.Fatalf("e2e: reload pg_hba.conf: %v", err)
	}
	return c
}

// URLOn is the URL of database name on the cluster at addr (one of its
// listen_addresses), as postgres.
func (c *Cluster) URLOn(addr netip.Addr, name string) string {
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", netip.AddrPortFrom(addr, uint16(c.Port())), name)
}

// AdminURL is the URL of the cluster's maintenance database.
func (c *Cluster) AdminURL() string { return c.URL("postgres") }

// URL is the URL of database name on the cluster, as postgres.
func (c *Cluster) URL(name string) string { return c.Cluster.URL("postgres", name) }

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
	if err := c.Cluster.Stop(context.Background(), "fast"); err != nil {
		t.Fatalf("e2e: stop private cluster: %v", err)
	}
}

// Crash stops the cluster in immediate mode, as a power cut of the server
// process would: no shutdown checkpoint, crash recovery on the next start.
func (c *Cluster) Crash(t testing.TB) {
	t.Helper()
	if err := c.Cluster.Stop(context.Background(), "immediate"); err != nil {
		t.Fatalf("e2e: crash private cluster: %v", err)
	}
}

// Start starts a stopped cluster on its port and waits until it accepts
// connections.
func (c *Cluster) Start(t testing.TB) {
	t.Helper()
	if err := c.Cluster.Start(context.Background()); err != nil {
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
	if err := c.Cluster.Freeze(); err != nil {
		t.Fatalf("e2e: freeze private cluster: %v", err)
	}
}

// Thaw resumes a frozen cluster with SIGCONT.
func (c *Cluster) Thaw(t testing.TB) {
	t.Helper()
	if err := c.Cluster.Thaw(); err != nil {
		t.Fatalf("e2e: thaw private cluster: %v", err)
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
