// Package store owns every SQL statement hookd runs: endpoints, messages,
// deliveries, the attempt log, breaker persistence and migrations. Other
// packages talk to Postgres only through it.
package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookd/hookd/internal/secretbox"
)

// ErrNotFound is returned when a row addressed by id does not exist (or is
// deleted).
var ErrNotFound = errors.New("not found")

// ErrConflict is returned when a write would violate a uniqueness or state
// rule, such as deleting a traffic class that is in use.
var ErrConflict = errors.New("conflict")

// Store runs hookd's SQL against one connection pool.
type Store struct {
	pool   *pgxpool.Pool
	logger *slog.Logger
	// secrets seals endpoint signing secrets and header values before they
	// are written and opens them as they are read; nil stores them in
	// plain text.
	secrets *secretbox.Keyring
	// resealRead, set by tests only, runs in resealBatch between its read
	// and its writes, so a test can change a row in between.
	resealRead func()
	// ops, when set, emits operational events (operational.go).
	ops *opsCache
	// filters holds the endpoint filters the fan-out has parsed.
	filters filterCache
	// ledgerPool, when set, is where RecordBatch writes (UseLedgerPool).
	ledgerPool atomic.Pointer[pgxpool.Pool]
	// sessionPool, when set, is where session advisory locks are taken
	// (UseSessionPool).
	sessionPool atomic.Pointer[pgxpool.Pool]
}

// UseLedgerPool has RecordBatch write through pool, connections of the
// ledger's own: a record of an attempt that was sent then never waits
// for a connection behind the rest of the process's work, nor finds the
// server's connections all taken. Nil goes back to the store's pool.
func (s *Store) UseLedgerPool(pool *pgxpool.Pool) { s.ledgerPool.Store(pool) }

// Option configures a Store.
type Option func(*Store)

// WithKeyring has the store keep endpoint signing secrets and header
// values sealed under k (see secrets.go); without it they are stored in
// plain text.
func WithKeyring(k *secretbox.Keyring) Option {
	return func(s *Store) { s.secrets = k }
}

// New returns a Store over pool.
func New(pool *pgxpool.Pool, logger *slog.Logger, opts ...Option) *Store {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Store{pool: pool, logger: logger}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Pool returns the underlying connection pool.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// PoolConfig describes how to open a pool.
type PoolConfig struct {
	// URL is a libpq connection string or URL.
	URL string
	// MaxConns caps the pool; zero keeps pgx's default.
	MaxConns int32
	// MinConns is how many connections the pool keeps open (zero: none).
	MinConns int32
	// ApplicationName is reported in pg_stat_activity.
	ApplicationName string
	// Pooled says URL goes through a connection pooler in transaction
	// mode (PgBouncer): see pooled.go for what changes.
	Pooled bool
	// DirectURL reaches the same database without the pooler; with Pooled,
	// OpenMigrated migrates through it (migrations hold a session lock).
	DirectURL string
}

// IdleInTransactionTimeout is how long a session of hookd's pools may sit
// idle inside a transaction before the server ends it (OpenPool).
const IdleInTransactionTimeout = 15 * time.Second

// OpenPool opens a pgx pool and checks that the database answers.
func OpenPool(ctx context.Context, cfg PoolConfig) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", redactURLError(err))
	}
	if cfg.MaxConns > 0 {
		pc.MaxConns = cfg.MaxConns
	}
	pc.MinConns = cfg.MinConns
	if cfg.ApplicationName != "" {
		pc.ConnConfig.RuntimeParams["application_name"] = cfg.ApplicationName
	}
	if cfg.Pooled {
		// Startup parameters other than application_name are refused by
		// the pooler, and a session setting would stay on whichever server
		// connection ran it: the role's settings carry them instead
		// (RoleSettings).
		if err := forPooler(pc, cfg.URL); err != nil {
			return nil, err
		}
	} else if _, set := pc.ConnConfig.RuntimeParams["jit"]; !set {
		// JIT compiles a plan whose estimate passes jit_above_cost, and
		// optimizes it past jit_optimize_above_cost: for a short query with
		// a pessimistic estimate (the unparker's, before a fresh table is
		// analyzed) that took 1-2.6 s of CPU a call against 1 ms to run.
		// No statement of hookd's runs long enough to earn it back. A URL
		// that sets jit keeps its own.
		pc.ConnConfig.RuntimeParams["jit"] = "off"
	}
	if _, set := pc.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"]; !set && !cfg.Pooled {
		// A process frozen inside a transaction (a stopped VM, a debugger)
		// holds its locks for as long as it is frozen, and every writer
		// queued behind them, fleet-wide, waits as long: a partition
		// maintainer frozen mid-move stopped every ledger write. No
		// transaction of hookd's waits between its statements for more
		// than a moment, so the server ends the session after
		// IdleInTransactionTimeout; the process reconnects when it wakes.
		// A URL that sets it keeps its own.
		pc.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"] = strconv.FormatInt(IdleInTransactionTimeout.Milliseconds(), 10)
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("open pool: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("ping database: %w", err)
	}
	return pool, nil
}

// redactURLError drops the connection string pgx echoes in parse errors, which
// can hold a password.
func redactURLError(err error) error {
	var pe *pgconn.ParseConfigError
	if errors.As(err, &pe) {
		return errors.New("invalid connection string")
	}
	return err
}

// Ping reports whether the database answers.
func (s *Store) Ping(ctx context.Context) error {
	return s.pool.Ping(ctx)
}

// inTx runs fn in a transaction, committing when it returns nil.
func (s *Store) inTx(ctx context.Context, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, s.pool, fn)
}

// ErrCommitUnknown marks a write whose COMMIT went out and got no clear
// answer (the connection broke): it may have committed. Any other error
// of inTxKnown's means nothing was written.
var ErrCommitUnknown = errors.New("commit outcome unknown")

// inTxKnown is inTx whose errors say whether anything may have been
// written: only a failed COMMIT wraps ErrCommitUnknown; a failed begin (no
// connection), statement or rollback left the database as it was.
func (s *Store) inTxKnown(ctx context.Context, pool *pgxpool.Pool, fn func(pgx.Tx) error) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx)) // a broken connection rolls back on its own
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) {
			// The server answered the COMMIT with an error: rolled back.
			return fmt.Errorf("commit: %w", err)
		}
		return fmt.Errorf("commit: %w: %w", ErrCommitUnknown, err)
	}
	return nil
}

// IsTransient reports whether err is a failure a retry of the same write
// may not meet: no connection (the server's connection limit, a restart,
// a network cut), a deadlock or serialization failure.
func IsTransient(err error) bool {
	if err == nil || errors.Is(err, ErrCommitUnknown) {
		return false
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) || pgconn.SafeToRetry(err) {
		return true
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		// connection_exception (08), insufficient_resources (53, with
		// too_many_connections), admin_shutdown, crash_shutdown,
		// cannot_connect_now, serialization_failure, deadlock_detected.
		return strings.HasPrefix(pe.Code, "08") || strings.HasPrefix(pe.Code, "53") ||
			pe.Code == "57P01" || pe.Code == "57P02" || pe.Code == "57P03" || pe.Code == "40001" || pe.Code == "40P01"
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, io.ErrUnexpectedEOF)
}

// customPlan, passed as a query's first argument, has Postgres plan the
// statement for its parameters at every execution (pgx's cached describe
// with the unnamed statement: still one round trip) instead of caching a
// generic plan per connection. A generic plan made while a table was small
// seq-scans it for as long as the connection lives, however big the table
// grows: in a bench run whose connections planned the ledger's UPDATE of
// deliveries on a nearly empty table, each call took 5.2 ms instead of 0.8
// and the run lost a quarter of its throughput. The batch statements that
// look up an array of keys in a fast-growing table use it; planning costs
// CPU at every call (0.1-1 ms), so statements run per API request do not.
const customPlan = pgx.QueryExecModeCacheDescribe

// isUniqueViolation reports whether err is a Postgres unique violation.
func isUniqueViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505"
}
