-- Traffic classes (named breaker configs), the class `auto` endpoints were
-- assigned from measured traffic, the history of those assignments, the
-- 401/403 streak behind auto-disable, and endpoint events.

CREATE TABLE traffic_classes (
    name        text COLLATE "C" PRIMARY KEY,
    -- The class as trafficclass encodes it (durations as Go strings).
    config      jsonb NOT NULL,
    builtin     boolean NOT NULL DEFAULT false,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- assigned_class: what `auto` resolved to at the last reclassification
-- (NULL until then: the default class).
ALTER TABLE endpoints ADD COLUMN assigned_class text;

CREATE TABLE class_changes (
    id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    endpoint_id         text COLLATE "C" NOT NULL,
    old_class           text NOT NULL,
    new_class           text NOT NULL,
    quiet_rps           double precision NOT NULL,
    healthy_error_rate  double precision NOT NULL,
    minutes             integer NOT NULL,
    reason              text NOT NULL,
    at                  timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX class_changes_endpoint_idx ON class_changes (endpoint_id, id);

-- The run of consecutive auth failures (401/403) per endpoint, updated in
-- the same transaction that logs the attempts, so each attempt counts once.
CREATE TABLE auth_streaks (
    endpoint_id  text COLLATE "C" PRIMARY KEY,
    failures     integer NOT NULL DEFAULT 0,
    first_at     timestamptz,
    last_at      timestamptz
);

CREATE TABLE endpoint_events (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    endpoint_id  text COLLATE "C" NOT NULL,
    kind         text NOT NULL,
    reason       text NOT NULL DEFAULT '',
    details      jsonb NOT NULL DEFAULT '{}',
    actor        text NOT NULL DEFAULT '',
    at           timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX endpoint_events_endpoint_idx ON endpoint_events (endpoint_id, id);
