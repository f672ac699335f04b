package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/hookd/hookd/internal/trafficclass"
	"github.com/hookd/hookd/migrations"
)

// migrateLockKey is the advisory lock every migrating process takes, so
// several processes starting at once apply migrations exactly once.
const migrateLockKey = 0x686f6f6b64 // "hookd"

// Migration is one numbered SQL file.
type Migration struct {
	Version int
	Name    string
	SQL     string
	// NoTransaction is set by a first line "-- hookd:no-transaction": the
	// migration's steps run one at a time outside a transaction (see
	// package migrations).
	NoTransaction bool
	// Steps are a non-transactional migration's statements in order.
	Steps []MigrationStep
}

// MigrationStep is one statement of a non-transactional migration.
type MigrationStep struct {
	SQL string
	// Index, when set, is a CREATE INDEX on a partitioned table, built
	// without blocking writes (buildPartitionedIndex).
	Index *partitionedIndex
	// BriefLock is set for a "-- hookd:brief-lock" step: a catalog change
	// that holds a lock writers wait for (a DROP INDEX on a partitioned
	// table), asked for a moment at a time (execBriefLock).
	BriefLock bool
}

// partitionedIndex is a "-- hookd:partitioned-index" step's CREATE INDEX.
type partitionedIndex struct {
	unique bool
	name   string
	table  string
	// rest is the definition after the table: columns, INCLUDE, WHERE.
	rest string
}

// Directives of a migration file: a first line noTransactionDirective makes
// it non-transactional, and each of its steps starts at a line stepDirective
// (one statement) or indexDirective (one CREATE INDEX on a partitioned
// table).
const (
	noTransactionDirective = "-- hookd:no-transaction"
	stepDirective          = "-- hookd:step"
	indexDirective         = "-- hookd:partitioned-index"
	briefLockDirective     = "-- hookd:brief-lock"
)

// createIndexRE reads a partitioned-index step: CREATE [UNIQUE] INDEX name
// ON table, then the rest of the definition.
var createIndexRE = regexp.MustCompile(`(?is)^CREATE\s+(UNIQUE\s+)?INDEX\s+([a-z_][a-z0-9_]*)\s+ON\s+([a-z_][a-z0-9_]*)\s+(\(.*?);?\s*$`)

// parseMigration reads a migration file named name (NNNN_description.sql).
func parseMigration(name, body string) (Migration, error) {
	num, _, ok := strings.Cut(name, "_")
	v, err := strconv.Atoi(num)
	if !ok || err != nil {
		return Migration{}, fmt.Errorf("migration %s: name must start with a number and an underscore", name)
	}
	m := Migration{Version: v, Name: strings.TrimSuffix(name, ".sql"), SQL: body}
	first, _, _ := strings.Cut(body, "\n")
	if strings.TrimSpace(first) != noTransactionDirective {
		if strings.Contains(body, "-- hookd:") {
			return Migration{}, fmt.Errorf("migration %s: hookd directives need %q as its first line", name, noTransactionDirective)
		}
		return m, nil
	}
	m.NoTransaction = true
	var cur *MigrationStep
	var text []string
	end := func() error {
		if cur == nil {
			return nil
		}
		cur.SQL = strings.TrimSpace(strings.Join(text, "\n"))
		if cur.SQL == "" {
			return fmt.Errorf("migration %s: step %d is empty", name, len(m.Steps)+1)
		}
		if cur.Index != nil {
			g := createIndexRE.FindStringSubmatch(cur.SQL)
			if g == nil {
				return fmt.Errorf("migration %s: step %d: a partitioned-index step is one CREATE [UNIQUE] INDEX name ON table (...)", name, len(m.Steps)+1)
			}
			*cur.Index = partitionedIndex{unique: g[1] != "", name: g[2], table: g[3], rest: strings.TrimSpace(g[4])}
		}
		m.Steps = append(m.Steps, *cur)
		cur, text = nil, nil
		return nil
	}
	for i, line := range strings.Split(body, "\n") {
		directive := strings.TrimSpace(line)
		switch {
		case i == 0:
		case directive == stepDirective || directive == indexDirective || directive == briefLockDirective:
			if err := end(); err != nil {
				return Migration{}, err
			}
			cur = &MigrationStep{BriefLock: directive == briefLockDirective}
			if directive == indexDirective {
				cur.Index = &partitionedIndex{}
			}
		case strings.HasPrefix(directive, "-- hookd:"):
			return Migration{}, fmt.Errorf("migration %s: unknown directive %q", name, directive)
		case cur != nil:
			text = append(text, line)
		case directive != "" && !strings.HasPrefix(directive, "--"):
			return Migration{}, fmt.Errorf("migration %s: a non-transactional migration's statements each follow %q or %q", name, stepDirective, indexDirective)
		}
	}
	if err := end(); err != nil {
		return Migration{}, err
	}
	if len(m.Steps) == 0 {
		return Migration{}, fmt.Errorf("migration %s: no steps", name)
	}
	return m, nil
}

// Migrations returns the embedded migrations in version order.
func Migrations() ([]Migration, error) {
	entries, err := fs.ReadDir(migrations.FS, ".")
	if err != nil {
		return nil, fmt.Errorf("read migrations: %w", err)
	}
	var out []Migration
	for _, e := range entries {
		name := e.Name()
		if path.Ext(name) != ".sql" {
			continue
		}
		body, err := fs.ReadFile(migrations.FS, name)
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", name, err)
		}
		m, err := parseMigration(name, string(body))
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i := 1; i < len(out); i++ {
		if out[i].Version == out[i-1].Version {
			return nil, fmt.Errorf("migrations %s and %s share version %d", out[i-1].Name, out[i].Name, out[i].Version)
		}
	}
	return out, nil
}

// UnknownMigrationsError is a database that has hookd migrations applied
// which this build does not have: a newer build migrated it, or a build
// whose migration was later reverted. Migrating past it could skip a
// different migration of the same number, so the migrator refuses.
type UnknownMigrationsError struct {
	Versions []int
}

func (e *UnknownMigrationsError) Error() string {
	vs := make([]string, len(e.Versions))
	for i, v := range e.Versions {
		vs[i] = fmt.Sprintf("%04d", v)
	}
	return fmt.Sprintf("database has hookd migration %s applied, which this build does not have (a newer build, or a reverted migration, ran against it): "+
		"refusing to run against it (docs/operations.md, Migrations)", strings.Join(vs, ", "))
}

// unknownVersions returns the applied versions not in all, in order.
func unknownVersions(applied []int, all []Migration) []int {
	known := make(map[int]bool, len(all))
	for _, m := range all {
		known[m.Version] = true
	}
	var out []int
	for _, v := range applied {
		if !known[v] {
			out = append(out, v)
		}
	}
	slices.Sort(out)
	return out
}

// droppedRiverIndexes are River's indexes that hookd's migrations drop
// (0025: the GIN index on river_job.args grows for ever under the job
// cleaner and nothing reads it).
var droppedRiverIndexes = []string{"river_job_args_index"}

// DroppedRiverIndexes returns the River indexes hookd's migrations drop.
func DroppedRiverIndexes() []string { return slices.Clone(droppedRiverIndexes) }

// RiverReindexIndexes are the indexes River's reindexer rebuilds: River's
// own list without those hookd's migrations drop, so the reindexer does
// not look for them on every run and warn that they are missing.
func RiverReindexIndexes() []string {
	return slices.DeleteFunc(river.ReindexerIndexNamesDefault(), func(name string) bool {
		return slices.Contains(droppedRiverIndexes, name)
	})
}

// OpenMigrated opens a pool as OpenPool does and, when migrate is true,
// brings the schema up to date before returning it. Behind a pooler
// (cfg.Pooled) the migrations run through connections of their own to
// cfg.DirectURL, closed once done: they hold a session lock.
func OpenMigrated(ctx context.Context, cfg PoolConfig, migrate bool, logger *slog.Logger) (*pgxpool.Pool, error) {
	pool, err := OpenPool(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if migrate {
		if err := migrateOn(ctx, pool, cfg, logger); err != nil {
			pool.Close()
			return nil, err
		}
	}
	return pool, nil
}

// migrateOn migrates through pool, or behind a pooler through a direct
// pool of its own.
func migrateOn(ctx context.Context, pool *pgxpool.Pool, cfg PoolConfig, logger *slog.Logger) error {
	if !cfg.Pooled {
		return Migrate(ctx, pool, logger)
	}
	if cfg.DirectURL == "" {
		return errors.New("migrate: behind a pooler migrations need the direct URL")
	}
	direct, err := OpenPool(ctx, PoolConfig{URL: cfg.DirectURL, MaxConns: 2, ApplicationName: cfg.ApplicationName + "/migrate"})
	if err != nil {
		return fmt.Errorf("migrate through the direct url: %w", err)
	}
	defer direct.Close()
	return Migrate(ctx, direct, logger)
}

// Migrate brings River's schema and then hookd's up to date under a
// session advisory lock, so several processes starting at once apply each
// migration exactly once: the others wait, then find nothing to do. River's
// migrations each run in their own transaction (one adds an enum value a
// later one uses); each of hookd's runs in its own transaction too.
func Migrate(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) error {
	if err := migrate(ctx, pool, logger, 0); err != nil {
		return err
	}
	// The built-in traffic classes are data the schema needs; an operator's
	// tuning of one is kept.
	return New(pool, logger).EnsureBuiltinClasses(ctx, trafficclass.Builtins())
}

// migrateLockPoll is how often a migrator asks again for the migration
// lock another holds.
const migrateLockPoll = 100 * time.Millisecond

// takeMigrationLock takes the migration lock on conn, asking again every
// migrateLockPoll while another process holds it. It never waits inside
// pg_advisory_lock: a statement waiting there is one a concurrent
// migrator's CREATE INDEX CONCURRENTLY waits for, while that migrator
// holds the lock, a deadlock.
func takeMigrationLock(ctx context.Context, conn *pgxpool.Conn) error {
	for {
		var got bool
		if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, int64(migrateLockKey)).Scan(&got); err != nil {
			return fmt.Errorf("take migration lock: %w", err)
		}
		if got {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("take migration lock: %w", ctx.Err())
		case <-time.After(migrateLockPoll):
		}
	}
}

// migrate applies the embedded migrations up to version upTo (0: all of
// them).
func migrate(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger, upTo int) error {
	all, err := Migrations()
	if err != nil {
		return err
	}
	return migrateWith(ctx, pool, logger, all, upTo)
}

// migrateWith applies River's migrations and then those of all up to
// version upTo (0: all of them) that the database has not applied,
// refusing a database that applied a version all does not hold.
func migrateWith(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger, all []Migration, upTo int) error {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: logger})
	if err != nil {
		return fmt.Errorf("river migrator: %w", err)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("acquire connection: %w", err)
	}
	defer conn.Release()
	if err := takeMigrationLock(ctx, conn); err != nil {
		return err
	}
	defer func() {
		_, _ = conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, int64(migrateLockKey))
	}()

	// Before anything runs: a database a build with other migrations has
	// used must not be changed by this one.
	versions, err := appliedVersions(ctx, conn)
	if err != nil {
		return err
	}
	if unknown := unknownVersions(versions, all); len(unknown) > 0 {
		return &UnknownMigrationsError{Versions: unknown}
	}
	res, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
	if err != nil {
		return fmt.Errorf("river migrations: %w", err)
	}
	for _, v := range res.Versions {
		logger.InfoContext(ctx, "migration_applied", slog.String("line", "river"), slog.Int("version", v.Version), slog.String("name", v.Name))
	}
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS hookd_migrations (
		version integer PRIMARY KEY,
		name text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return fmt.Errorf("create migrations table: %w", err)
	}
	applied := map[int]bool{}
	for _, v := range versions {
		applied[v] = true
	}
	for _, m := range all {
		if applied[m.Version] || (upTo > 0 && m.Version > upTo) {
			continue
		}
		if m.NoTransaction {
			err = applyWithoutTransaction(ctx, conn, m, logger)
		} else {
			err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, m.SQL); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, `INSERT INTO hookd_migrations (version, name) VALUES ($1, $2)`, m.Version, m.Name)
				return err
			})
		}
		if err != nil {
			return fmt.Errorf("apply migration %s: %w", m.Name, err)
		}
		logger.InfoContext(ctx, "migration_applied", slog.String("line", "hookd"), slog.Int("version", m.Version), slog.String("name", m.Name))
	}
	return nil
}

// versionQuerier reads the applied versions.
type versionQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// appliedVersions lists the hookd migrations the database has applied
// (none before hookd_migrations exists).
func appliedVersions(ctx context.Context, q versionQuerier) ([]int, error) {
	var exists bool
	if err := q.QueryRow(ctx, `SELECT to_regclass('hookd_migrations') IS NOT NULL`).Scan(&exists); err != nil {
		return nil, fmt.Errorf("look for the migrations table: %w", err)
	}
	if !exists {
		return nil, nil
	}
	rows, err := q.Query(ctx, `SELECT version FROM hookd_migrations ORDER BY version`)
	if err != nil {
		return nil, fmt.Errorf("list applied migrations: %w", err)
	}
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return nil, fmt.Errorf("list applied migrations: %w", err)
	}
	return versions, nil
}

// applyWithoutTransaction runs a non-transactional migration's steps one
// at a time, each committed on its own, and then records the migration. A
// run cut short leaves the migration unrecorded, and the next run starts
// it again: every step must be safe to run twice.
func applyWithoutTransaction(ctx context.Context, conn *pgxpool.Conn, m Migration, logger *slog.Logger) error {
	for i, st := range m.Steps {
		var err error
		switch {
		case st.Index != nil:
			err = buildPartitionedIndex(ctx, conn, *st.Index, logger)
		case st.BriefLock:
			err = execBriefLock(ctx, conn, st.SQL)
		default:
			_, err = conn.Exec(ctx, st.SQL)
		}
		if err != nil {
			return fmt.Errorf("step %d: %w", i+1, err)
		}
	}
	_, err := conn.Exec(ctx, `INSERT INTO hookd_migrations (version, name) VALUES ($1, $2)`, m.Version, m.Name)
	return err
}

// migrationLockAttempts bounds how often a step that needs a lock writers
// conflict with asks for it, maintenanceLockTimeout each time and dropPause
// apart.
const migrationLockAttempts = 50

// execBriefLock runs a statement that holds a lock writers wait for, but
// only for a catalog change: it waits at most maintenanceLockTimeout for
// that lock (every writer queues behind a waiting request) and asks again
// after a pause, so no writer waits much longer than that.
func execBriefLock(ctx context.Context, conn *pgxpool.Conn, sql string) error {
	if _, err := conn.Exec(ctx, `SET lock_timeout = '`+maintenanceLockTimeout+`'`); err != nil {
		return fmt.Errorf("set lock_timeout: %w", err)
	}
	defer func() { _, _ = conn.Exec(context.WithoutCancel(ctx), `RESET lock_timeout`) }()
	var err error
	for range migrationLockAttempts {
		if _, err = conn.Exec(ctx, sql); !isLockTimeout(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(dropPause):
		}
	}
	return err
}

// buildPartitionedIndex creates an index on a partitioned table without
// blocking its writers: the parent's index ON ONLY the parent (invalid, no
// build), then each partition's with CREATE INDEX CONCURRENTLY, attached to
// it; the parent's becomes valid when the last is attached. A partition
// the maintainer attaches meanwhile gets its index built and attached by
// the ATTACH itself (it is empty). Each partition's index is named after
// the parent's and the partition, so a run cut short finds its work: a
// valid index is attached as it is, an invalid one (a build interrupted)
// is dropped and built again.
func buildPartitionedIndex(ctx context.Context, conn *pgxpool.Conn, ix partitionedIndex, logger *slog.Logger) error {
	unique := ""
	if ix.unique {
		unique = "UNIQUE "
	}
	if err := execBriefLock(ctx, conn, `CREATE `+unique+`INDEX IF NOT EXISTS `+ix.name+` ON ONLY `+ix.table+` `+ix.rest); err != nil {
		return fmt.Errorf("create %s on the parent: %w", ix.name, err)
	}
	// A partition dropped while its index was being built fails the build;
	// the next round lists the partitions again.
	for round := 0; ; round++ {
		rows, err := conn.Query(ctx, `
			SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
			WHERE i.inhparent = $1::regclass AND NOT EXISTS (
				SELECT 1 FROM pg_index x JOIN pg_inherits xi ON xi.inhrelid = x.indexrelid
				WHERE x.indrelid = c.oid AND xi.inhparent = $2::regclass)
			ORDER BY c.relname`, ix.table, ix.name)
		if err != nil {
			return fmt.Errorf("list partitions of %s: %w", ix.table, err)
		}
		parts, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("list partitions of %s: %w", ix.table, err)
		}
		if len(parts) == 0 {
			break
		}
		if round == 5 {
			return fmt.Errorf("partitions of %s still without %s after %d rounds: %s", ix.table, ix.name, round, strings.Join(parts, ", "))
		}
		for _, p := range parts {
			name := partitionIndexName(ix.name, ix.table, p)
			var valid *bool
			err := conn.QueryRow(ctx, `SELECT (SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass($1))`, name).Scan(&valid)
			if err != nil {
				return fmt.Errorf("look up %s: %w", name, err)
			}
			if valid != nil && !*valid {
				if _, err := conn.Exec(ctx, `DROP INDEX CONCURRENTLY IF EXISTS `+name); err != nil {
					return fmt.Errorf("drop the interrupted build %s: %w", name, err)
				}
			}
			if valid == nil || !*valid {
				if _, err := conn.Exec(ctx, `CREATE `+unique+`INDEX CONCURRENTLY IF NOT EXISTS `+name+` ON `+p+` `+ix.rest); err != nil {
					if isUndefined(err) {
						continue
					}
					return fmt.Errorf("build %s: %w", name, err)
				}
			}
			if err := execBriefLock(ctx, conn, `ALTER INDEX `+ix.name+` ATTACH PARTITION `+name); err != nil {
				if isUndefined(err) {
					continue
				}
				return fmt.Errorf("attach %s: %w", name, err)
			}
			logger.InfoContext(ctx, "migration_index_built", slog.String("index", ix.name), slog.String("partition", p))
		}
	}
	var valid bool
	if err := conn.QueryRow(ctx, `SELECT indisvalid FROM pg_index WHERE indexrelid = $1::regclass`, ix.name).Scan(&valid); err != nil {
		return fmt.Errorf("look up %s: %w", ix.name, err)
	}
	if !valid {
		return fmt.Errorf("index %s on %s is not valid after every partition's was attached", ix.name, ix.table)
	}
	return nil
}

// isUndefined reports whether err is PostgreSQL's undefined table or
// object: a partition dropped or detached while a step was working on it.
func isUndefined(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "42704")
}

// partitionIndexName names the index of partition part built for index
// (of table): the index's name and the partition's own suffix
// (deliveries_x_idx_p20261201t000000), cut to PostgreSQL's 63 bytes with a
// hash when longer.
func partitionIndexName(index, table, part string) string {
	suffix := strings.TrimPrefix(part, table)
	if suffix == part {
		suffix = "_" + part
	}
	name := index + suffix
	if len(name) > 63 {
		sum := sha256.Sum256([]byte(name))
		name = name[:54] + "_" + hex.EncodeToString(sum[:])[:8]
	}
	return name
}

// MigrationsCurrent reports whether every embedded migration, River's
// included, has been applied. It backs /readyz. A database that has a
// hookd migration this build does not have is not current either: it
// returns false with an *UnknownMigrationsError.
func MigrationsCurrent(ctx context.Context, pool *pgxpool.Pool) (bool, error) {
	all, err := Migrations()
	if err != nil {
		return false, err
	}
	rows, err := pool.Query(ctx, `SELECT version FROM hookd_migrations`)
	if err != nil {
		return false, fmt.Errorf("read migration versions: %w", err)
	}
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return false, fmt.Errorf("read migration versions: %w", err)
	}
	if unknown := unknownVersions(versions, all); len(unknown) > 0 {
		return false, &UnknownMigrationsError{Versions: unknown}
	}
	if len(versions) < len(all) {
		return false, nil
	}
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return false, fmt.Errorf("river migrator: %w", err)
	}
	existing, err := migrator.ExistingVersions(ctx)
	if err != nil {
		return false, fmt.Errorf("read river migration version: %w", err)
	}
	want := migrator.AllVersions()
	return len(existing) >= len(want), nil
}
