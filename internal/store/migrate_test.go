package store_test

import (
	"context"
	"fmt"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/store/storetest"
)

func TestParseMigration(t *testing.T) {
	t.Parallel()
	m, err := store.ParseMigration("0001_plain.sql", "CREATE TABLE a (id int);\nCREATE INDEX a_idx ON a (id);\n")
	require.NoError(t, err)
	require.Equal(t, 1, m.Version)
	require.Equal(t, "0001_plain", m.Name)
	require.False(t, m.NoTransaction)
	require.Empty(t, m.Steps)

	m, err = store.ParseMigration("0027_index.sql", `-- hookd:no-transaction
-- Why the index is there.

-- hookd:step
CREATE INDEX CONCURRENTLY IF NOT EXISTS a_idx
    ON a (id);
-- hookd:partitioned-index
CREATE UNIQUE INDEX deliveries_x_idx ON deliveries (tenant_id, id) WHERE status = 'failed';
-- hookd:brief-lock
DROP INDEX IF EXISTS deliveries_y_idx;
`)
	require.NoError(t, err)
	require.True(t, m.NoTransaction)
	require.Len(t, m.Steps, 3)
	require.Equal(t, "CREATE INDEX CONCURRENTLY IF NOT EXISTS a_idx\n    ON a (id);", m.Steps[0].SQL)
	require.Nil(t, m.Steps[0].Index)
	require.False(t, m.Steps[0].BriefLock)
	require.NotNil(t, m.Steps[1].Index)
	require.True(t, m.Steps[2].BriefLock)
	require.Equal(t, "DROP INDEX IF EXISTS deliveries_y_idx;", m.Steps[2].SQL)

	for _, tc := range []struct{ name, body, want string }{
		{"directive in a transactional migration", "CREATE TABLE a (id int);\n-- hookd:step\nSELECT 1;", "first line"},
		{"unknown directive", "-- hookd:no-transaction\n-- hookd:stpe\nSELECT 1;", "unknown directive"},
		{"statement outside a step", "-- hookd:no-transaction\nSELECT 1;", "each follow"},
		{"no step", "-- hookd:no-transaction\n-- nothing\n", "no steps"},
		{"empty step", "-- hookd:no-transaction\n-- hookd:step\n-- hookd:step\nSELECT 1;", "empty"},
		{"partitioned index that is not a CREATE INDEX", "-- hookd:no-transaction\n-- hookd:partitioned-index\nALTER TABLE a ADD b int;", "CREATE [UNIQUE] INDEX"},
		{"bad name", "x_file.sql", "number"},
	} {
		name := "0027_bad.sql"
		if tc.name == "bad name" {
			name, tc.body = tc.body, "SELECT 1;"
		}
		_, err := store.ParseMigration(name, tc.body)
		require.ErrorContains(t, err, tc.want, tc.name)
	}
}

// TestMigrateRefusesAnUnknownVersion: a database that applied a migration
// this build does not have (0026, reverted after some databases applied
// it) makes the migrator refuse, naming the version, rather than skip a
// later migration of that number; /readyz's check says not current, with
// the same error.
func TestMigrateRefusesAnUnknownVersion(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `INSERT INTO hookd_migrations (version, name) VALUES (26, '0026_river_job_vacuum_truncate')`)
	require.NoError(t, err)

	err = store.Migrate(ctx, db.Pool, nil)
	var unknown *store.UnknownMigrationsError
	require.ErrorAs(t, err, &unknown)
	require.Equal(t, []int{26}, unknown.Versions)
	require.ErrorContains(t, err, "0026")
	current, err := store.MigrationsCurrent(ctx, db.Pool)
	require.ErrorAs(t, err, &unknown)
	require.False(t, current)
}

// TestMigrationsCurrentComparesEveryVersion: a database missing a
// migration below its highest one is not current.
func TestMigrationsCurrentComparesEveryVersion(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	ctx := context.Background()
	current, err := store.MigrationsCurrent(ctx, db.Pool)
	require.NoError(t, err)
	require.True(t, current)
	_, err = db.Pool.Exec(ctx, `DELETE FROM hookd_migrations WHERE version = 20`)
	require.NoError(t, err)
	current, err = store.MigrationsCurrent(ctx, db.Pool)
	require.NoError(t, err)
	require.False(t, current)
}

// TestPartitionedIndexBuildsWithoutBlockingWrites: a non-transactional
// migration builds an index on a populated partitioned table while
// writers insert into it, and no insert waits for a lock as long as the
// build takes: the index's expression sleeps 1 ms a row, so building it
// under a lock writers wait for (a transactional CREATE INDEX on the
// parent) would hold them for over 1 s, and each insert gives up after 500 ms
// (the writers' own rows cost nothing to index).
// The interrupted build an earlier run left on one partition (an invalid
// index of the name the migrator gives it) is built again; the parent's
// index is valid at the end, with one attached per partition.
func TestPartitionedIndexBuildsWithoutBlockingWrites(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `
		CREATE TABLE hookd_test_events (id text COLLATE "C" NOT NULL, n int NOT NULL, PRIMARY KEY (id)) PARTITION BY RANGE (id);
		CREATE TABLE hookd_test_events_pa PARTITION OF hookd_test_events FOR VALUES FROM ('a') TO ('b');
		CREATE TABLE hookd_test_events_pb PARTITION OF hookd_test_events FOR VALUES FROM ('b') TO ('c');
		CREATE TABLE hookd_test_events_default PARTITION OF hookd_test_events DEFAULT;
		CREATE FUNCTION hookd_test_slow(n int) RETURNS int LANGUAGE plpgsql IMMUTABLE AS $$
			BEGIN IF n >= 0 THEN PERFORM pg_sleep(0.001); END IF; RETURN n; END $$;
		INSERT INTO hookd_test_events SELECT 'a' || lpad(g::text, 6, '0'), g FROM generate_series(1, 1000) g;
		INSERT INTO hookd_test_events SELECT 'b' || g, 1 FROM generate_series(1, 5) g;
		INSERT INTO hookd_test_events SELECT 'z' || g, g FROM generate_series(1, 5) g;`)
	require.NoError(t, err)
	// An interrupted build: a unique index over duplicates fails, invalid.
	leftover := store.PartitionIndexName("hookd_test_events_slow_idx", "hookd_test_events", "hookd_test_events_pb")
	_, err = db.Pool.Exec(ctx, `CREATE UNIQUE INDEX CONCURRENTLY `+leftover+` ON hookd_test_events_pb (n)`)
	require.Error(t, err)

	all, err := store.Migrations()
	require.NoError(t, err)
	m, err := store.ParseMigration("9001_test_slow_index.sql", `-- hookd:no-transaction
-- hookd:partitioned-index
CREATE INDEX hookd_test_events_slow_idx ON hookd_test_events (hookd_test_slow(n));
`)
	require.NoError(t, err)
	all = append(all, m)

	var (
		stop     = make(chan struct{})
		wg       sync.WaitGroup
		inserted atomic.Int64
		mu       sync.Mutex
		errs     []error
	)
	for w := range 2 {
		conn, err := pgx.Connect(ctx, db.URL)
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close(context.Background()) })
		_, err = conn.Exec(ctx, `SET lock_timeout = '500ms'`)
		require.NoError(t, err)
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := conn.Exec(ctx, `INSERT INTO hookd_test_events VALUES ($1, -1)`, fmt.Sprintf("a%d-%06d", w, i)); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				inserted.Add(1)
			}
		})
	}
	err = store.MigrateWith(ctx, db.Pool, all)
	close(stop)
	wg.Wait()
	require.NoError(t, err)
	require.Empty(t, errs, "no insert waited 500 ms for a lock")
	require.Positive(t, inserted.Load(), "the writers ran during the build")

	var valid bool
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT indisvalid FROM pg_index WHERE indexrelid = 'hookd_test_events_slow_idx'::regclass`).Scan(&valid))
	require.True(t, valid)
	rows, err := db.Pool.Query(ctx, `
		SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		JOIN pg_index x ON x.indexrelid = i.inhrelid
		WHERE i.inhparent = 'hookd_test_events_slow_idx'::regclass AND x.indisvalid ORDER BY 1`)
	require.NoError(t, err)
	attached, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"hookd_test_events_slow_idx_default", "hookd_test_events_slow_idx_pa", leftover}, attached)
	var recorded bool
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM hookd_migrations WHERE version = 9001)`).Scan(&recorded))
	require.True(t, recorded)
	// A second run finds nothing to do.
	require.NoError(t, store.MigrateWith(ctx, db.Pool, all))
}

// blockingIndexBuild finds a CREATE INDEX on a partitioned table that a
// migration runs inside its transaction: it blocks every write to the
// table while it builds.
var blockingIndexBuild = regexp.MustCompile(`(?is)\bCREATE\s+(UNIQUE\s+)?INDEX\b[^;]*?\bON\s+(ONLY\s+)?(messages|message_payloads|deliveries|delivery_attempts)\b`)

// lastBlockingIndexMigration is the last migration that built an index on
// a partitioned table in its transaction (0020, applied by databases as it
// is); later ones use a partitioned-index step.
const lastBlockingIndexMigration = 20

// TestNoMigrationBlocksWritesWithAnIndexBuild: no migration after 0020
// builds an index on a partitioned table in a transaction.
func TestNoMigrationBlocksWritesWithAnIndexBuild(t *testing.T) {
	t.Parallel()
	blocks := func(m store.Migration) bool {
		if !m.NoTransaction {
			return blockingIndexBuild.MatchString(m.SQL)
		}
		for _, st := range m.Steps {
			if st.Index == nil && blockingIndexBuild.MatchString(st.SQL) {
				return true
			}
		}
		return false
	}
	for _, tc := range []struct {
		body   string
		blocks bool
	}{
		{"CREATE INDEX deliveries_x_idx ON deliveries (tenant_id);", true},
		{"CREATE UNIQUE INDEX\n  m_idx ON ONLY messages (id);", true},
		{"CREATE INDEX endpoints_x_idx ON endpoints (url);", false},
		{"-- hookd:no-transaction\n-- hookd:step\nCREATE INDEX d_idx ON delivery_attempts (trial);", true},
		{"-- hookd:no-transaction\n-- hookd:partitioned-index\nCREATE INDEX d_idx ON delivery_attempts (trial);", false},
	} {
		m, err := store.ParseMigration("0027_x.sql", tc.body)
		require.NoError(t, err)
		require.Equal(t, tc.blocks, blocks(m), tc.body)
	}
	all, err := store.Migrations()
	require.NoError(t, err)
	for _, m := range all {
		if m.Version > lastBlockingIndexMigration {
			require.False(t, blocks(m), "%s builds an index on a partitioned table inside its transaction: use a -- hookd:partitioned-index step", m.Name)
		}
	}
}
