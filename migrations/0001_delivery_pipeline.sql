-- Endpoints, messages, deliveries and the attempt log: the delivery pipeline.

CREATE TABLE endpoints (
    id                          text COLLATE "C" PRIMARY KEY,
    tenant_id                   text NOT NULL,
    url                         text NOT NULL,
    description                 text NOT NULL DEFAULT '',
    event_types                 text[] NOT NULL DEFAULT '{}',
    secret                      text NOT NULL,
    previous_secret             text,
    previous_secret_expires_at  timestamptz,
    traffic_class               text NOT NULL DEFAULT 'auto',
    metadata                    jsonb NOT NULL DEFAULT '{}',
    status                      text NOT NULL DEFAULT 'enabled' CHECK (status IN ('enabled', 'disabled')),
    disabled_reason             text,
    created_at                  timestamptz NOT NULL DEFAULT now(),
    updated_at                  timestamptz NOT NULL DEFAULT now(),
    deleted_at                  timestamptz
);

CREATE INDEX endpoints_tenant_id_idx ON endpoints (tenant_id, id) WHERE deleted_at IS NULL;
CREATE INDEX endpoints_id_live_idx ON endpoints (id) WHERE deleted_at IS NULL;

CREATE TABLE messages (
    id               text COLLATE "C" PRIMARY KEY,
    tenant_id        text NOT NULL,
    event_type       text NOT NULL,
    -- json (not jsonb) keeps the payload's bytes exactly as accepted: they are
    -- what is signed and sent on every attempt.
    payload          json NOT NULL,
    idempotency_key  text,
    created_at       timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX messages_tenant_id_idx ON messages (tenant_id, id);

-- An idempotency key names the first message accepted with it for 24 hours.
CREATE TABLE idempotency_keys (
    tenant_id   text NOT NULL,
    key         text NOT NULL,
    message_id  text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, key)
);

CREATE TABLE deliveries (
    id                  text COLLATE "C" PRIMARY KEY,
    message_id          text NOT NULL REFERENCES messages (id),
    endpoint_id         text NOT NULL REFERENCES endpoints (id),
    tenant_id           text NOT NULL,
    status              text NOT NULL CHECK (status IN ('pending', 'delivered', 'failed', 'waiting', 'held')),
    -- attempts made over every series; a manual retry starts a new series.
    attempt_count       integer NOT NULL DEFAULT 0,
    series              integer NOT NULL DEFAULT 1,
    job_id              bigint,
    last_attempt_at     timestamptz,
    next_attempt_at     timestamptz,
    last_status_code    integer,
    last_error          text,
    breaker_open_until  timestamptz,
    delivered_at        timestamptz,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX deliveries_message_id_idx ON deliveries (message_id, id);
CREATE INDEX deliveries_endpoint_status_idx ON deliveries (endpoint_id, status, created_at);

-- The delivery log: one row per attempt. It is the raw material for tuning
-- (dispatcher replay --from-db, traffic classification), hence the
-- (endpoint_id, attempted_at) index.
CREATE TABLE delivery_attempts (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    delivery_id       text NOT NULL,
    message_id        text NOT NULL,
    endpoint_id       text NOT NULL,
    attempt_number    integer NOT NULL,
    attempted_at      timestamptz NOT NULL,
    duration_ms       double precision NOT NULL,
    status_code       integer,
    error_class       text,
    classification    text NOT NULL CHECK (classification IN ('success', 'failure', 'ignore', 'auth_failure', 'blocked')),
    response_excerpt  text NOT NULL DEFAULT '' CHECK (octet_length(response_excerpt) <= 4096),
    trial             boolean NOT NULL DEFAULT false
);

CREATE INDEX delivery_attempts_endpoint_time_idx ON delivery_attempts (endpoint_id, attempted_at);
CREATE INDEX delivery_attempts_delivery_idx ON delivery_attempts (delivery_id, id);
