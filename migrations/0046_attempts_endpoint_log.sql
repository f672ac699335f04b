-- hookd:no-transaction
-- A tuning pass reads each endpoint's log of the range in (attempted_at,
-- id) order, an endpoint at a time, twice. Through
-- delivery_attempts_endpoint_time_idx each attempt costs a heap page
-- fetch (one endpoint's attempts are spread over every page of a
-- partition); with the id in the key and the classification included
-- the read is an index-only scan of the endpoint's run of the index. It
-- serves every reader of the old index (a prefix of its key), which is
-- dropped: an attempt written keeps one index entry for the endpoint.
-- hookd:partitioned-index
CREATE INDEX delivery_attempts_endpoint_log_idx ON delivery_attempts (endpoint_id, attempted_at, id) INCLUDE (classification);
-- hookd:brief-lock
DROP INDEX IF EXISTS delivery_attempts_endpoint_time_idx;
