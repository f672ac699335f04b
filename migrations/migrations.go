// Package migrations holds hookd's numbered SQL migrations, embedded in the
// binaries so `api migrate` and `dispatcher migrate` need no files on disk.
//
// Files are named NNNN_description.sql and applied in numeric order, each in its
// own transaction. River's own migrations run in the same step (see
// store.Migrate). A database that has applied a version no file here has
// (a newer build's, or one reverted after it was applied) is refused.
//
// A migration that must not hold a lock writers wait for while it works
// (an index on a large table) declares itself non-transactional with the
// first line
//
//	-- hookd:no-transaction
//
// and is a list of steps, each run on its own outside a transaction:
//
//	-- hookd:step
//	CREATE INDEX CONCURRENTLY IF NOT EXISTS endpoints_url_idx ON endpoints (url);
//	-- hookd:partitioned-index
//	CREATE INDEX deliveries_x_idx ON deliveries (tenant_id, id);
//
// A step that changes only the catalog but holds a lock writers wait for
// (a DROP INDEX on a partitioned table) follows
//
//	-- hookd:brief-lock
//
// and asks for its lock for at most 100 ms at a time, again after a pause.
//
// A step is one statement. A partitioned-index step is one CREATE [UNIQUE]
// INDEX on a partitioned table (messages, message_payloads, deliveries,
// delivery_attempts): the migrator creates it ON ONLY the parent, builds
// each partition's with CREATE INDEX CONCURRENTLY and attaches it, so
// writers wait only for the catalog changes (each lock asked for at most
// 100 ms at a time). Every index on a partitioned table is added this way
// (0020, from before the rule, built its indexes in a transaction). The
// migration is recorded once every step has run; a run cut short starts
// it again, so every step must be safe to run twice (IF NOT EXISTS; a
// partitioned-index step resumes where it stopped).
package migrations

import "embed"

// FS holds every migration file.
//
//go:embed *.sql
var FS embed.FS
