package config

import (
	"github.com/hookd/hookd/internal/store"
)

// Database is the flags saying where a process's database is:
// --database-url, and behind a connection pooler in transaction mode
// (PgBouncer) --db-pooled and --direct-database-url, bound the same way
// by both binaries.
type Database struct {
	url, direct *string
	pooled      *bool
}

// BindDatabase binds --database-url (DATABASE_URL), --db-pooled
// (DB_POOLED) and --direct-database-url (DIRECT_DATABASE_URL) on f;
// pooledAlso says what else this binary does behind a pooler ("" for
// nothing), sessionUse what of its work uses the direct URL.
func BindDatabase(f *FlagSet, pooledAlso, sessionUse string) *Database {
	return &Database{
		url: f.String("database-url", "DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "Postgres connection URL"),
		pooled: f.Bool("db-pooled", "DB_POOLED", false,
			"--database-url goes through a connection pooler in transaction mode (PgBouncer): its pool uses no named prepared statements (pgx's cache_describe) and sends no startup parameter but application_name (set jit and idle_in_transaction_session_timeout for hookd's role: docs/scaling.md), and what needs a session of its own uses --direct-database-url"+pooledAlso),
		direct: f.String("direct-database-url", "DIRECT_DATABASE_URL", "",
			"with --db-pooled, a URL of the same database that reaches PostgreSQL itself, not the pooler, for "+sessionUse),
	}
}

// URL is --database-url.
func (d *Database) URL() string { return *d.url }

// Pooled is --db-pooled.
func (d *Database) Pooled() bool { return *d.pooled }

// DirectURL is the URL of what needs a session: --direct-database-url
// behind a pooler, else --database-url.
func (d *Database) DirectURL() string {
	if *d.pooled {
		return *d.direct
	}
	return *d.url
}

// Check refuses a combination that cannot work: a direct URL without a
// pooler (every connection is direct then: the setting would be
// ignored), the pooled URL as the direct one, a pooled URL whose settings
// the pooler refuses or loses, and, when needsDirect says why one is
// needed (empty: nothing in this run needs a session), no direct URL.
func (d *Database) Check(needsDirect string) error {
	switch {
	case !*d.pooled && *d.direct != "":
		return Invalid("direct-database-url", "DIRECT_DATABASE_URL", "is used only with --db-pooled (DB_POOLED): without a pooler every connection goes to --database-url")
	case !*d.pooled:
		return nil
	case *d.direct == "" && needsDirect != "":
		return Invalid("direct-database-url", "DIRECT_DATABASE_URL", "is required with --db-pooled (DB_POOLED): %s need a session of their own, which a pooler in transaction mode does not keep", needsDirect)
	case *d.direct != "" && *d.direct == *d.url:
		return Invalid("direct-database-url", "DIRECT_DATABASE_URL", "is --database-url itself: with --db-pooled it must reach PostgreSQL without the pooler")
	}
	if err := store.CheckPooledURL(*d.url); err != nil {
		return Invalid("database-url", "DATABASE_URL", "with --db-pooled (DB_POOLED): %v", err)
	}
	return nil
}

// PoolConfig is a pool on --database-url for this process, maxConns
// connections named appName.
func (d *Database) PoolConfig(maxConns int, appName string) store.PoolConfig {
	return store.PoolConfig{URL: *d.url, MaxConns: int32(maxConns), ApplicationName: appName,
		Pooled: *d.pooled, DirectURL: *d.direct}
}
