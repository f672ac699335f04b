-- Per-endpoint circuit breakers, shared by every dispatcher process.

-- One row per endpoint: the stored fields of breaker.Breaker. generation is
-- bumped on every state change; writes are versioned on it, so two workers
-- can never both make the same transition.
CREATE TABLE breaker_states (
    endpoint_id           text COLLATE "C" PRIMARY KEY REFERENCES endpoints (id),
    state                 text NOT NULL DEFAULT 'closed' CHECK (state IN ('closed', 'open', 'half_open', 'isolated')),
    generation            bigint NOT NULL DEFAULT 1,
    opened_at             timestamptz,
    open_until            timestamptz,
    trial_successes       integer NOT NULL DEFAULT 0,
    open_streak           integer NOT NULL DEFAULT 0,
    trips                 bigint NOT NULL DEFAULT 0,
    consecutive_failures  integer NOT NULL DEFAULT 0,
    updated_at            timestamptz NOT NULL DEFAULT now()
);

INSERT INTO breaker_states (endpoint_id) SELECT id FROM endpoints;

-- The rolling window's buckets, aligned to absolute time and keyed by the
-- generation they were counted in: a new generation (a close) starts an
-- empty window, and outcomes of an older generation are never counted.
-- UNLOGGED: buckets are recent evidence, cheap to lose in a crash, and
-- written at every flush by every dispatcher; WAL would cost ~10x.
CREATE UNLOGGED TABLE breaker_buckets (
    endpoint_id   text COLLATE "C" NOT NULL,
    generation    bigint NOT NULL,
    bucket_start  timestamptz NOT NULL,
    successes     integer NOT NULL DEFAULT 0,
    failures      integer NOT NULL DEFAULT 0,
    PRIMARY KEY (endpoint_id, generation, bucket_start)
);

-- Every transition, with the window's figures at that moment (an open whose
-- window rate sits near the threshold in normal operation is a false trip)
-- and who made it.
CREATE TABLE breaker_transitions (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    endpoint_id   text COLLATE "C" NOT NULL,
    from_state    text NOT NULL,
    to_state      text NOT NULL,
    generation    bigint NOT NULL,
    at            timestamptz NOT NULL,
    reason        text NOT NULL,
    failure_rate  double precision NOT NULL,
    observations  integer NOT NULL,
    failures      integer NOT NULL,
    consecutive   integer NOT NULL DEFAULT 0,
    open_until    timestamptz,
    actor         text NOT NULL,
    note          text NOT NULL DEFAULT '',
    -- shadow: a would-be transition of a class in shadow mode (enforce=false).
    shadow        boolean NOT NULL DEFAULT false
);

CREATE INDEX breaker_transitions_endpoint_idx ON breaker_transitions (endpoint_id, id);
CREATE INDEX breaker_transitions_at_idx ON breaker_transitions (at);
