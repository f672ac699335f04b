// Command pgstate proves that a test run left a PostgreSQL server it did not
// start alone. `pgstate record FILE` saves, when a server answers at
// PGSTATE_URL (default the conventional local server,
// postgres://postgres@127.0.0.1:5432/postgres), its postmaster's start time,
// its postgresql.auto.conf (what ALTER SYSTEM writes), the settings it took
// from configuration files, and the test databases on it; `pgstate check
// FILE` reads them again and fails naming what changed: a restart, an
// ALTER SYSTEM or another configuration change, a server that appeared or
// went away. Test databases that appeared and are still there after a grace
// period (a test binary's cleanup runs as it exits) are reported but do not
// fail the check: on a shared server they may be another run's, and
// storetest's own test proves it drops its own. make test records before
// the tests and checks after them.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

const defaultURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable&connect_timeout=5"

// testDatabases matches the names internal/store/storetest gives its
// databases.
const testDatabases = `^hookd_(t|tmpl)_[0-9a-f]+(_build)?$`

func main() {
	if err := run(context.Background(), os.Args[1:], os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "pgstate:", err)
		os.Exit(1)
	}
}

// state is what a test run must leave as it found it.
type state struct {
	Running       bool              `json:"running"`
	URL           string            `json:"url"`
	PostmasterAt  string            `json:"postmaster_start_time,omitempty"`
	DataDirectory string            `json:"data_directory,omitempty"`
	AutoConf      string            `json:"postgresql_auto_conf"`
	FileSettings  map[string]string `json:"file_settings,omitempty"`
	TestDatabases []string          `json:"test_databases,omitempty"`
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	if len(args) != 2 || (args[0] != "record" && args[0] != "check") {
		return errors.New("usage: pgstate record|check FILE")
	}
	u := getenv("PGSTATE_URL")
	if u == "" {
		u = defaultURL
	}
	now, err := read(ctx, u)
	if err != nil {
		return err
	}
	if args[0] == "record" {
		b, err := json.MarshalIndent(now, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(args[1], b, 0o644); err != nil {
			return fmt.Errorf("record: %w", err)
		}
		if now.Running {
			fmt.Fprintf(stdout, "pgstate: recorded the server at %s (postmaster started %s)\n", redact(u), now.PostmasterAt)
		} else {
			fmt.Fprintf(stdout, "pgstate: no server answers at %s; none must after the run\n", redact(u))
		}
		return nil
	}
	b, err := os.ReadFile(args[1])
	if err != nil {
		return fmt.Errorf("check: read the record: %w", err)
	}
	var before state
	if err := json.Unmarshal(b, &before); err != nil {
		return fmt.Errorf("check: parse the record: %w", err)
	}
	if diffs := compare(before, now); len(diffs) > 0 {
		return fmt.Errorf("the run changed the PostgreSQL server at %s:\n  %s", redact(u), strings.Join(diffs, "\n  "))
	}
	left := newDatabases(before, now)
	for deadline := time.Now().Add(grace(getenv)); len(left) > 0 && time.Now().Before(deadline); {
		time.Sleep(500 * time.Millisecond) // a poll of another process's cleanup
		if now, err = read(ctx, u); err != nil {
			return err
		}
		left = newDatabases(before, now)
	}
	if len(left) > 0 {
		fmt.Fprintf(stdout, "pgstate: warning: test databases appeared on %s during the run and are still there (this run's tests or another process's): %s\n",
			redact(u), strings.Join(left, ", "))
	}
	fmt.Fprintf(stdout, "pgstate: the server at %s runs as the run found it, with the same configuration\n", redact(u))
	return nil
}

// grace is how long check waits for test databases to be dropped:
// PGSTATE_GRACE, default 30s.
func grace(getenv func(string) string) time.Duration {
	if d, err := time.ParseDuration(getenv("PGSTATE_GRACE")); err == nil {
		return d
	}
	return 30 * time.Second
}

// newDatabases returns the test databases in after that were not in before.
func newDatabases(before, after state) []string {
	var out []string
	for _, d := range after.TestDatabases {
		if !slices.Contains(before.TestDatabases, d) {
			out = append(out, d)
		}
	}
	return out
}

// read connects to u and reads its state; a server that does not answer is
// a state too (not running).
func read(ctx context.Context, u string) (state, error) {
	s := state{URL: redact(u)}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return s, nil
	}
	defer conn.Close(context.Background())
	s.Running = true
	var started time.Time
	if err := conn.QueryRow(ctx, `SELECT pg_postmaster_start_time(), current_setting('data_directory')`).Scan(&started, &s.DataDirectory); err != nil {
		return s, fmt.Errorf("read the postmaster: %w", err)
	}
	s.PostmasterAt = started.UTC().Format(time.RFC3339Nano)
	// pg_read_file is relative to the data directory; missing_ok for a
	// server that never had an ALTER SYSTEM.
	var auto *string
	if err := conn.QueryRow(ctx, `SELECT pg_read_file('postgresql.auto.conf', 0, 1048576, true)`).Scan(&auto); err != nil {
		return s, fmt.Errorf("read postgresql.auto.conf: %w", err)
	}
	if auto != nil {
		s.AutoConf = *auto
	}
	rows, err := conn.Query(ctx, `SELECT name, setting FROM pg_settings WHERE source = 'configuration file'`)
	if err != nil {
		return s, fmt.Errorf("read settings: %w", err)
	}
	s.FileSettings = map[string]string{}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return s, fmt.Errorf("read settings: %w", err)
		}
		s.FileSettings[k] = v
	}
	if err := rows.Err(); err != nil {
		return s, fmt.Errorf("read settings: %w", err)
	}
	rows, err = conn.Query(ctx, `SELECT datname FROM pg_database WHERE datname ~ $1 ORDER BY 1`, testDatabases)
	if err != nil {
		return s, fmt.Errorf("list databases: %w", err)
	}
	if s.TestDatabases, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		return s, fmt.Errorf("list databases: %w", err)
	}
	return s, nil
}

// compare names each way after differs from before.
func compare(before, after state) []string {
	switch {
	case !before.Running && after.Running:
		return []string{"a server answers that did not before the run"}
	case before.Running && !after.Running:
		return []string{"the server no longer answers (stopped or crashed)"}
	case !before.Running:
		return nil
	}
	var diffs []string
	if before.PostmasterAt != after.PostmasterAt || before.DataDirectory != after.DataDirectory {
		diffs = append(diffs, fmt.Sprintf("postmaster restarted: started %s, now %s", before.PostmasterAt, after.PostmasterAt))
	}
	if before.AutoConf != after.AutoConf {
		diffs = append(diffs, fmt.Sprintf("postgresql.auto.conf changed (ALTER SYSTEM):\n--- before\n%s--- after\n%s", before.AutoConf, after.AutoConf))
	}
	for k, v := range after.FileSettings {
		if w, ok := before.FileSettings[k]; !ok || w != v {
			diffs = append(diffs, fmt.Sprintf("setting %s from a configuration file: %q, was %q", k, v, w))
		}
	}
	for k, w := range before.FileSettings {
		if _, ok := after.FileSettings[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("setting %s no longer from a configuration file (was %q)", k, w))
		}
	}
	slices.Sort(diffs)
	return diffs
}

// redact drops a password from a URL for messages.
func redact(u string) string {
	cfg, err := pgx.ParseConfig(u)
	if err != nil {
		return "the configured URL"
	}
	return fmt.Sprintf("%s:%d", cfg.Host, cfg.Port)
}
