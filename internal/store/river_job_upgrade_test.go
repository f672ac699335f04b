package store_test

import (
	"context"
	"strings"
	"testing"

	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/store/storetest"
)

// TestUpgradeDropsRiverJobArgsIndex: a database at the schema before,
// holding completed and waiting jobs, is migrated with every job and its
// args kept, no GIN index left on river_job's args (its keys would
// outlive the rows the cleaner deletes), the metadata index kept, and
// every index River's reindexer is given still there to rebuild.
func TestUpgradeDropsRiverJobArgsIndex(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	ctx := context.Background()
	resetTo(t, db, 24)
	require.Equal(t, 1, argsGINIndexes(t, db), "the schema before has River's GIN index on args")
	_, err := db.Pool.Exec(ctx, `
		INSERT INTO river_job (kind, queue, max_attempts, state, finalized_at, args) VALUES
			('deliver', 'deliver', 100, 'completed', now(), '{"delivery_id": "dlv_a", "message_id": "msg_1"}'),
			('deliver', 'deliver', 100, 'completed', now(), '{"delivery_id": "dlv_b", "message_id": "msg_1"}'),
			('deliver', 'deliver', 100, 'available', NULL, '{"delivery_id": "dlv_c", "message_id": "msg_2"}')`)
	require.NoError(t, err)

	require.NoError(t, store.Migrate(ctx, db.Pool, nil))
	require.Zero(t, argsGINIndexes(t, db))
	var ids []string
	require.NoError(t, db.Pool.QueryRow(ctx, `
		SELECT array_agg(args->>'delivery_id' ORDER BY id) FROM river_job`).Scan(&ids))
	require.Equal(t, []string{"dlv_a", "dlv_b", "dlv_c"}, ids)
	var indexes []string
	require.NoError(t, db.Pool.QueryRow(ctx, `
		SELECT array_agg(indexname::text) FROM pg_indexes WHERE tablename = 'river_job'`).Scan(&indexes))
	require.Contains(t, indexes, "river_job_metadata_index")
	require.Contains(t, store.RiverReindexIndexes(), "river_job_metadata_index")
	require.NotContains(t, store.RiverReindexIndexes(), "river_job_args_index")
	for _, name := range store.RiverReindexIndexes() {
		require.Contains(t, indexes, name, "River's reindexer would look for %s", name)
	}
}

// argsGINIndexes counts the GIN indexes on river_job that cover args.
func argsGINIndexes(t *testing.T, db *storetest.DB) int {
	t.Helper()
	var n int
	require.NoError(t, db.Pool.QueryRow(context.Background(), `
		SELECT count(*) FROM pg_index i
		JOIN pg_class c ON c.oid = i.indexrelid
		JOIN pg_am am ON am.oid = c.relam
		JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
		WHERE i.indrelid = 'river_job'::regclass AND am.amname = 'gin' AND a.attname = 'args'`).Scan(&n))
	return n
}

// TestRiverMigrationsLeaveTheDroppedIndexAlone: hookd drops an index River
// created, so a River migration after the one creating it that named it
// (to alter or drop it without IF EXISTS) would fail on a hookd database.
// A River upgrade that does so fails here first.
func TestRiverMigrationsLeaveTheDroppedIndexAlone(t *testing.T) {
	t.Parallel()
	migrator, err := rivermigrate.New(riverpgxv5.New(nil), nil)
	require.NoError(t, err)
	created := map[string]int{}
	for _, m := range migrator.AllVersions() {
		for _, name := range store.DroppedRiverIndexes() {
			if !strings.Contains(m.SQLUp, name) {
				continue
			}
			if _, ok := created[name]; !ok {
				created[name] = m.Version
				continue
			}
			t.Errorf("River migration %d names %s, which migration 0025 dropped", m.Version, name)
		}
	}
	for _, name := range store.DroppedRiverIndexes() {
		require.Contains(t, created, name, "no River migration creates %s", name)
	}
}
