-- A dispatcher's breaker outcomes go to rows of its own: breaker_tallies
-- is breaker_buckets with the writing process (its fleet ID) in the key,
-- so the dispatchers of a fleet never wait for each other's flush on one
-- bucket row (every lock wait seen at four dispatchers was on those rows)
-- and readers add the rows of a bucket up, as they add buckets. Readers
-- read both tables: a dispatcher of the previous version still writes to
-- breaker_buckets during a rolling upgrade, and its rows are counted.
--
-- UNLOGGED, as breaker_buckets: recent evidence, cheap to lose in a
-- crash. A new table: no lock on anything in use.
CREATE UNLOGGED TABLE breaker_tallies (
    endpoint_id   text COLLATE "C" NOT NULL,
    generation    bigint NOT NULL,
    bucket_start  timestamptz NOT NULL,
    shard         text COLLATE "C" NOT NULL,
    successes     integer NOT NULL DEFAULT 0,
    failures      integer NOT NULL DEFAULT 0,
    PRIMARY KEY (endpoint_id, generation, bucket_start, shard)
) WITH (autovacuum_vacuum_scale_factor = 0.02);
