-- Time-partitioned delivery data, so retention drops a whole interval with
-- one DDL statement instead of deleting rows one by one.
--
-- messages, message_payloads and deliveries are range-partitioned by id:
-- ids are ULIDs whose first 10 characters after the prefix are the
-- millisecond time, so the bound of an interval is prefix + its time + 16
-- zeros, PRIMARY KEY (id) stays valid, and a lookup by id prunes to one
-- partition with no change to the query. A delivery's id carries its
-- message's time exactly (store.childID), so a message and its deliveries
-- always share an interval. delivery_attempts is partitioned by
-- attempted_at: the attempt log is read by endpoint and time.
--
-- Payloads move to their own table so that --payload-retention is a
-- partition drop, not an UPDATE of every message.
--
-- Upgrade in place: each existing table becomes the first partition of its
-- new parent (<table>_legacy, every key up to just past now); only the
-- payloads are copied (into message_payloads_legacy). The api and the
-- dispatcher must be stopped while this runs (see README). Rows written
-- before the maintainer's first run land in the default partitions, which
-- that run drains.
--
-- Each table gets a DEFAULT partition, so an insert never fails for want of
-- a partition; the maintainer creates partitions ahead and moves any row the
-- default caught into a proper partition.
--
-- deliveries keep no foreign key. One to messages (partitioned too) would
-- make each DETACH check the other table; one to endpoints makes DROP of a
-- deliveries partition lock endpoints, which every request reads while it
-- writes deliveries: the drop deadlocked with message inserts in a
-- benchmark run. The invariants hold in code: deliveries are only inserted
-- with their message, in the same transaction, for endpoints read in that
-- transaction; endpoints are never deleted, only marked deleted_at; and a
-- message's partition is dropped only after its deliveries' partition of
-- the same interval.

-- hookd_id_time_prefix is the 10-character time part of a ULID minted at
-- at (milliseconds since the epoch, Crockford base32).
CREATE FUNCTION hookd_id_time_prefix(at timestamptz) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT AS $$
DECLARE
    ms bigint := floor(extract(epoch FROM at) * 1000)::bigint;
    out text := '';
BEGIN
    FOR i IN 0..9 LOOP
        out := out || substr('0123456789ABCDEFGHJKMNPQRSTVWXYZ', ((ms >> (45 - 5 * i)) & 31)::int + 1, 1);
    END LOOP;
    RETURN out;
END $$;

-- hookd_id_time is when a prefixed ULID (msg_..., dlv_...) was minted.
CREATE FUNCTION hookd_id_time(id text) RETURNS timestamptz
LANGUAGE plpgsql IMMUTABLE STRICT AS $$
DECLARE
    t text := substr(id, strpos(id, '_') + 1, 10);
    ms bigint := 0;
BEGIN
    FOR i IN 1..10 LOOP
        ms := ms * 32 + strpos('0123456789ABCDEFGHJKMNPQRSTVWXYZ', substr(t, i, 1)) - 1;
    END LOOP;
    RETURN to_timestamp(ms / 1000.0);
END $$;

-- Every partition the maintainer manages, with its interval ([from_at,
-- to_at); from_at NULL for a legacy partition that starts at MINVALUE).
CREATE TABLE hookd_partitions (
    name     text COLLATE "C" PRIMARY KEY,
    parent   text NOT NULL CHECK (parent IN ('messages', 'message_payloads', 'deliveries', 'delivery_attempts')),
    from_at  timestamptz,
    to_at    timestamptz NOT NULL
);

CREATE INDEX hookd_partitions_parent_idx ON hookd_partitions (parent, to_at);

-- The old tables keep their data and become partitions: their indexes and
-- constraints are renamed out of the way of the parents'.
ALTER TABLE deliveries DROP CONSTRAINT deliveries_message_id_fkey;
ALTER TABLE deliveries DROP CONSTRAINT deliveries_endpoint_id_fkey;
ALTER TABLE messages RENAME TO messages_legacy;
ALTER INDEX messages_pkey RENAME TO messages_legacy_pkey;
ALTER INDEX messages_tenant_id_idx RENAME TO messages_legacy_tenant_id_idx;
ALTER TABLE deliveries RENAME TO deliveries_legacy;
ALTER INDEX deliveries_pkey RENAME TO deliveries_legacy_pkey;
ALTER INDEX deliveries_message_id_idx RENAME TO deliveries_legacy_message_id_idx;
ALTER INDEX deliveries_endpoint_status_idx RENAME TO deliveries_legacy_endpoint_status_idx;
ALTER INDEX deliveries_parked_idx RENAME TO deliveries_legacy_parked_idx;
ALTER TABLE deliveries_legacy DROP CONSTRAINT deliveries_status_check;
ALTER TABLE delivery_attempts RENAME TO delivery_attempts_legacy;
ALTER INDEX delivery_attempts_pkey RENAME TO delivery_attempts_legacy_pkey;
ALTER INDEX delivery_attempts_endpoint_time_idx RENAME TO delivery_attempts_legacy_endpoint_time_idx;
ALTER INDEX delivery_attempts_delivery_idx RENAME TO delivery_attempts_legacy_delivery_idx;

CREATE TABLE messages (
    id               text COLLATE "C" NOT NULL,
    tenant_id        text NOT NULL,
    event_type       text NOT NULL,
    idempotency_key  text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (id)
) PARTITION BY RANGE (id);

CREATE INDEX messages_tenant_id_idx ON messages (tenant_id, id);

-- json (not jsonb) keeps the payload's bytes exactly as accepted: they are
-- what is signed and sent on every attempt.
CREATE TABLE message_payloads (
    message_id  text COLLATE "C" NOT NULL,
    payload     json NOT NULL,
    PRIMARY KEY (message_id)
) PARTITION BY RANGE (message_id);

CREATE TABLE deliveries (
    id                  text COLLATE "C" NOT NULL,
    message_id          text NOT NULL,
    endpoint_id         text NOT NULL,
    tenant_id           text NOT NULL,
    -- expired: final; retention reached the delivery (or its payload)
    -- before it was delivered or failed.
    status              text NOT NULL CONSTRAINT deliveries_status_check
                        CHECK (status IN ('pending', 'delivered', 'failed', 'waiting', 'held', 'expired')),
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
    updated_at          timestamptz NOT NULL DEFAULT now(),
    series_base         integer NOT NULL DEFAULT 0,
    PRIMARY KEY (id)
) PARTITION BY RANGE (id);

CREATE INDEX deliveries_message_id_idx ON deliveries (message_id, id);
CREATE INDEX deliveries_endpoint_status_idx ON deliveries (endpoint_id, status, created_at);
CREATE INDEX deliveries_parked_idx ON deliveries (endpoint_id, created_at, id)
    WHERE status = 'waiting' AND job_id IS NULL;
-- The deliveries not final yet, in id (creation) order: retention finds
-- the ones it must make expired without reading the rest of an interval.
-- Small (most deliveries leave it within a second); its write is one
-- more index entry per delivery.
CREATE INDEX deliveries_unfinished_idx ON deliveries (id)
    WHERE status IN ('pending', 'waiting', 'held');

-- No primary key: ids come from one sequence, and a key on a table
-- partitioned by time would have to include attempted_at (rebuilding the
-- old table's index at upgrade). Lists page by (delivery_id, id) and
-- (endpoint_id, attempted_at).
CREATE TABLE delivery_attempts (
    id                bigint GENERATED ALWAYS AS IDENTITY,
    delivery_id       text NOT NULL,
    message_id        text NOT NULL,
    endpoint_id       text NOT NULL,
    attempt_number    integer NOT NULL,
    attempted_at      timestamptz NOT NULL,
    duration_ms       double precision NOT NULL,
    status_code       integer,
    error_class       text,
    classification    text NOT NULL CONSTRAINT delivery_attempts_classification_check
                      CHECK (classification IN ('success', 'failure', 'ignore', 'auth_failure', 'blocked')),
    response_excerpt  text NOT NULL DEFAULT '' CONSTRAINT delivery_attempts_response_excerpt_check
                      CHECK (octet_length(response_excerpt) <= 4096),
    trial             boolean NOT NULL DEFAULT false
) PARTITION BY RANGE (attempted_at);

CREATE INDEX delivery_attempts_endpoint_time_idx ON delivery_attempts (endpoint_id, attempted_at);
CREATE INDEX delivery_attempts_delivery_idx ON delivery_attempts (delivery_id, id);

DO $$
DECLARE
    -- The legacy partitions end just past every existing key (a client
    -- clock ahead of the database's may have minted ids in the future),
    -- on a whole millisecond.
    hi timestamptz := date_trunc('milliseconds', greatest(
        now(),
        (SELECT hookd_id_time(max(id)) + interval '1 millisecond' FROM messages_legacy),
        (SELECT hookd_id_time(max(id)) + interval '1 millisecond' FROM deliveries_legacy),
        (SELECT max(attempted_at) + interval '1 millisecond' FROM delivery_attempts_legacy)));
    p text := hookd_id_time_prefix(hi) || '0000000000000000';
BEGIN
    CREATE TABLE message_payloads_legacy (LIKE message_payloads INCLUDING ALL);
    INSERT INTO message_payloads_legacy (message_id, payload) SELECT id, payload FROM messages_legacy;
    ALTER TABLE messages_legacy DROP COLUMN payload;

    -- The old attempts table's own identity would generate nothing more;
    -- the parent's continues where it stopped (below).
    ALTER TABLE delivery_attempts_legacy ALTER COLUMN id DROP IDENTITY;

    ALTER TABLE deliveries_legacy ADD CONSTRAINT deliveries_status_check
        CHECK (status IN ('pending', 'delivered', 'failed', 'waiting', 'held', 'expired'));

    EXECUTE format('ALTER TABLE messages ATTACH PARTITION messages_legacy FOR VALUES FROM (MINVALUE) TO (%L)', 'msg_' || p);
    EXECUTE format('ALTER TABLE message_payloads ATTACH PARTITION message_payloads_legacy FOR VALUES FROM (MINVALUE) TO (%L)', 'msg_' || p);
    EXECUTE format('ALTER TABLE deliveries ATTACH PARTITION deliveries_legacy FOR VALUES FROM (MINVALUE) TO (%L)', 'dlv_' || p);
    EXECUTE format('ALTER TABLE delivery_attempts ATTACH PARTITION delivery_attempts_legacy FOR VALUES FROM (MINVALUE) TO (%L)', hi);
    INSERT INTO hookd_partitions (name, parent, from_at, to_at) VALUES
        ('messages_legacy', 'messages', NULL, hi),
        ('message_payloads_legacy', 'message_payloads', NULL, hi),
        ('deliveries_legacy', 'deliveries', NULL, hi),
        ('delivery_attempts_legacy', 'delivery_attempts', NULL, hi);

    -- The attempt ids continue where the old table's sequence stopped.
    PERFORM setval(pg_get_serial_sequence('delivery_attempts', 'id'),
        greatest((SELECT max(id) FROM delivery_attempts_legacy), 1),
        (SELECT max(id) IS NOT NULL FROM delivery_attempts_legacy));
END $$;

CREATE TABLE messages_default PARTITION OF messages DEFAULT;
CREATE TABLE message_payloads_default PARTITION OF message_payloads DEFAULT;
CREATE TABLE deliveries_default PARTITION OF deliveries DEFAULT
    WITH (autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_insert_scale_factor = 0.05);
CREATE TABLE delivery_attempts_default PARTITION OF delivery_attempts DEFAULT;

-- The small logs are pruned by time in batches.
CREATE INDEX idempotency_keys_created_at_idx ON idempotency_keys (created_at);
CREATE INDEX endpoint_events_at_idx ON endpoint_events (at);
CREATE INDEX class_changes_at_idx ON class_changes (at);
