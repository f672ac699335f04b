package store

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
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
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			return nil, fmt.Errorf("migration %s: name must start with a number and an underscore", name)
		}
		body, err := fs.ReadFile(migrations.FS, name)
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", name, err)
		}
		out = append(out, Migration{Version: v, Name: strings.TrimSuffix(name, ".sql"), SQL: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i := 1; i < len(out); i++ {
		if out[i].Version == out[i-1].Version {
			return nil, fmt.Errorf("migrations %s and %s share version %d", out[i-1].Name, out[i].Name, out[i].Version)
		}
	}
	return out, nil
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
// brings the schema up to date before returning it.
func OpenMigrated(ctx context.Context, cfg PoolConfig, migrate bool, logger *slog.Logger) (*pgxpool.Pool, error) {
	pool, err := OpenPool(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if migrate {
		if err := Migrate(ctx, pool, logger); err != nil {
			pool.Close()
			return nil, err
		}
	}
	return pool, nil
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

// migrate applies the migrations up to version upTo (0: all of them).
func migrate(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger, upTo int) error {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	all, err := Migrations()
	if err != nil {
		return err
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
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, int64(migrateLockKey)); err != nil {
		return fmt.Errorf("take migration lock: %w", err)
	}
	defer func() {
		_, _ = conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, int64(migrateLockKey))
	}()

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
	rows, err := conn.Query(ctx, `SELECT version FROM hookd_migrations`)
	if err != nil {
		return fmt.Errorf("list applied migrations: %w", err)
	}
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return fmt.Errorf("list applied migrations: %w", err)
	}
	applied := map[int]bool{}
	for _, v := range versions {
		applied[v] = true
	}
	for _, m := range all {
		if applied[m.Version] || (upTo > 0 && m.Version > upTo) {
			continue
		}
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO hookd_migrations (version, name) VALUES ($1, $2)`, m.Version, m.Name)
			return err
		})
		if err != nil {
			return fmt.Errorf("apply migration %s: %w", m.Name, err)
		}
		logger.InfoContext(ctx, "migration_applied", slog.String("line", "hookd"), slog.Int("version", m.Version), slog.String("name", m.Name))
	}
	return nil
}

// MigrationsCurrent reports whether every embedded migration, River's
// included, has been applied. It backs /readyz.
func MigrationsCurrent(ctx context.Context, pool *pgxpool.Pool) (bool, error) {
	all, err := Migrations()
	if err != nil {
		return false, err
	}
	var latest int
	err = pool.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM hookd_migrations`).Scan(&latest)
	if err != nil {
		return false, fmt.Errorf("read migration version: %w", err)
	}
	if len(all) > 0 && latest < all[len(all)-1].Version {
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
