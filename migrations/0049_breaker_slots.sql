-- A dispatcher's breaker outcomes go to a fixed ring of rows per
-- endpoint, generation and process: breaker_slots is breaker_tallies
-- keyed by the bucket's slot (its index modulo 40, twice the buckets of a
-- window) instead of its start. A flush adds to its slot's row while the
-- row holds the same bucket, and overwrites it once the bucket is new:
-- every write is an update of a row that stays (HOT: no indexed column
-- changes), where breaker_tallies took an insert per bucket and a delete
-- when it left its window, both growing with the processes times the
-- busy endpoints. Readers read the three tables: a dispatcher of the
-- previous versions still writes breaker_tallies or breaker_buckets
-- during a rolling upgrade, and its rows are counted.
--
-- UNLOGGED, as the others: recent evidence, cheap to lose in a crash.
-- Half of each page is left free for the updates' new versions. A new
-- table: no lock on anything in use.
CREATE UNLOGGED TABLE breaker_slots (
    endpoint_id   text COLLATE "C" NOT NULL,
    generation    bigint NOT NULL,
    shard         text COLLATE "C" NOT NULL,
    slot          smallint NOT NULL,
    bucket_start  timestamptz NOT NULL,
    successes     integer NOT NULL DEFAULT 0,
    failures      integer NOT NULL DEFAULT 0,
    PRIMARY KEY (endpoint_id, generation, shard, slot)
) WITH (fillfactor = 50, autovacuum_vacuum_scale_factor = 0.02);
