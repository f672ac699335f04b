// Package store owns every SQL statement hookd runs: endpoints, messages,
// deliveries, the attempt log, breaker persistence and migrations. Other
// packages talk to Postgres only through it.
package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
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
}

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
	// ApplicationName is reported in pg_stat_activity.
	ApplicationName string
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
	if cfg.ApplicationName != "" {
		pc.ConnConfig.RuntimeParams["application_name"] = cfg.ApplicationName
	}
	if _, set := pc.ConnConfig.RuntimeParams["jit"]; !set {
		// JIT compiles a plan whose estimate passes jit_above_cost, and
		// optimizes it past jit_optimize_above_cost: for a short query with
		// a pessimistic estimate (the unparker's, before a fresh table is
		// analyzed) that took 1-2.6 s of CPU a call against 1 ms to run.
		// No statement of hookd's runs long enough to earn it back. A URL
		// that sets jit keeps its own.
		pc.ConnConfig.RuntimeParams["jit"] = "off"
	}
	if _, set := pc.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"]; !set {
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
