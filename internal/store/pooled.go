package store

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A connection pooler in transaction mode (PgBouncer's pool_mode =
// transaction) hands each transaction to whichever of its server
// connections is free, so nothing of a session outlives the transaction
// that made it. Behind one (PoolConfig.Pooled):
//
//   - statements are unnamed: pgx's cache_describe describes each once per
//     connection and parses it at every execution, since a named prepared
//     statement lives on one server connection (PgBouncer 1.18 does not
//     follow them);
//   - the pool sends no startup parameter but application_name (PgBouncer
//     refuses the others): jit and idle_in_transaction_session_timeout come
//     from the role's settings (RoleSettings), which every server
//     connection applies when it starts, whichever client it serves;
//   - what needs a session of its own (LISTEN, session advisory locks,
//     migrations) connects to a direct URL instead (UseSessionPool,
//     PoolConfig.DirectURL).

// pooledParams are the startup parameters PgBouncer passes on; it refuses
// every other unless told to drop it (ignore_startup_parameters).
var pooledParams = map[string]bool{
	"application_name": true, "client_encoding": true, "datestyle": true,
	"timezone": true, "standard_conforming_strings": true,
}

// CheckPooledURL reports what in the connection string u a pooler in
// transaction mode cannot serve: a startup parameter it refuses, or
// named prepared statements (default_query_exec_mode=cache_statement).
// The error names the setting, never the URL (it may hold a password).
func CheckPooledURL(u string) error {
	pc, err := pgx.ParseConfig(u)
	if err != nil {
		return fmt.Errorf("parse database url: %w", redactURLError(err))
	}
	return checkPooled(u, pc)
}

func checkPooled(u string, pc *pgx.ConnConfig) error {
	var refused []string
	for k := range pc.RuntimeParams {
		if !pooledParams[strings.ToLower(k)] {
			refused = append(refused, k)
		}
	}
	if len(refused) > 0 {
		sort.Strings(refused)
		return fmt.Errorf("sets %s, which a pooler in transaction mode refuses as a startup parameter (or drops, with ignore_startup_parameters): set it for hookd's role instead (ALTER ROLE ... SET)",
			strings.Join(refused, ", "))
	}
	if mode, ok := connSetting(u, "default_query_exec_mode"); ok && mode == "cache_statement" {
		return fmt.Errorf("sets default_query_exec_mode=cache_statement, whose named prepared statements a pooler in transaction mode loses between transactions: leave it out (hookd then uses cache_describe) or choose describe_exec, exec or simple_protocol")
	}
	return nil
}

// forPooler readies a pool's config for a pooler in transaction mode.
func forPooler(pc *pgxpool.Config, u string) error {
	if err := checkPooled(u, pc.ConnConfig); err != nil {
		return err
	}
	if _, chosen := connSetting(u, "default_query_exec_mode"); !chosen {
		pc.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
	}
	return nil
}

// connSetting returns the value of key in a connection string, URL or
// key=value form, and whether it is set there.
func connSetting(connString, key string) (string, bool) {
	if strings.HasPrefix(connString, "postgres://") || strings.HasPrefix(connString, "postgresql://") {
		pu, err := url.Parse(connString)
		if err != nil {
			return "", false
		}
		q := pu.Query()
		return q.Get(key), q.Has(key)
	}
	for _, f := range strings.Fields(connString) {
		if k, v, ok := strings.Cut(f, "="); ok && strings.TrimSpace(k) == key {
			return strings.Trim(v, "'"), true
		}
	}
	return "", false
}

// RoleSettings returns the statements that would give hookd's sessions on
// pool the settings OpenPool sends as startup parameters when there is no
// pooler (jit off, idle_in_transaction_session_timeout of
// IdleInTransactionTimeout), for each the server's sessions lack; none
// when they have them all. Behind a pooler, the role's settings are the
// one place these can come from: a SET would stay on the server
// connection that ran it, serving other clients and missing from the
// others.
func RoleSettings(ctx context.Context, pool *pgxpool.Pool) ([]string, error) {
	var jit, idle string
	if err := pool.QueryRow(ctx, `SELECT current_setting('jit'), current_setting('idle_in_transaction_session_timeout')`).Scan(&jit, &idle); err != nil {
		return nil, fmt.Errorf("read session settings: %w", err)
	}
	var out []string
	if jit != "off" {
		out = append(out, "ALTER ROLE CURRENT_USER SET jit = off")
	}
	if d, err := parsePGDuration(idle); err != nil || d <= 0 || d > IdleInTransactionTimeout {
		out = append(out, fmt.Sprintf("ALTER ROLE CURRENT_USER SET idle_in_transaction_session_timeout = '%s'", pgDuration(IdleInTransactionTimeout)))
	}
	return out, nil
}

// WarnRoleSettings logs a warning when the sessions on pool, a pool behind
// a pooler, lack settings hookd cannot send through it, with the
// statements that give them (RoleSettings).
func WarnRoleSettings(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) {
	missing, err := RoleSettings(ctx, pool)
	if err != nil {
		logger.WarnContext(ctx, "role_settings", slog.String("error", err.Error()))
		return
	}
	if len(missing) > 0 {
		logger.WarnContext(ctx, "role_settings",
			slog.String("reason", "behind a pooler these settings come from hookd's role, whose sessions lack them (docs/scaling.md)"),
			slog.String("run", strings.Join(missing, "; ")))
	}
}

// parsePGDuration reads a time setting as current_setting shows it
// ("0", "15s", "500ms", "1min", "2h", "1d").
func parsePGDuration(s string) (time.Duration, error) {
	if s == "0" {
		return 0, nil
	}
	i := strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' })
	if i <= 0 {
		return 0, fmt.Errorf("time setting %q", s)
	}
	var n int64
	if _, err := fmt.Sscan(s[:i], &n); err != nil {
		return 0, fmt.Errorf("time setting %q: %w", s, err)
	}
	unit := map[string]time.Duration{"us": time.Microsecond, "ms": time.Millisecond, "s": time.Second,
		"min": time.Minute, "h": time.Hour, "d": 24 * time.Hour}[s[i:]]
	if unit == 0 {
		return 0, fmt.Errorf("time setting %q", s)
	}
	return time.Duration(n) * unit, nil
}

// pgDuration writes d as a PostgreSQL time setting.
func pgDuration(d time.Duration) string {
	if d%time.Second == 0 {
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return fmt.Sprintf("%dms", d/time.Millisecond)
}

// UseSessionPool has the session advisory locks (WithTuningLock,
// WithMaintenanceLock) taken on pool's connections: behind a pooler in
// transaction mode the store's own pool keeps no session, and a lock
// taken there would stay on a server connection serving others. Its
// connections hold each lock for the pass it guards, idle meanwhile: the
// tuning leader's and a class's, and the maintainer's, at most three at
// once. Nil goes back to the store's pool.
func (s *Store) UseSessionPool(pool *pgxpool.Pool) { s.sessionPool.Store(pool) }

// SessionPoolConns is the connections a session pool needs (UseSessionPool).
const SessionPoolConns = 3

// lockPool is where session advisory locks are taken.
func (s *Store) lockPool() *pgxpool.Pool {
	if p := s.sessionPool.Load(); p != nil {
		return p
	}
	return s.pool
}
