-- Operational endpoints are rows of endpoints with the reserved tenant id
-- '_operational' (a tenant id starts with a letter or a digit, so no
-- tenant can have it); their events are messages of that tenant, carried
-- by the delivery pipeline like any other. No table changes for them.
--
-- failed_at is when a delivery last reached 'failed' after an attempt
-- (its retries exhausted), recovered_at when a delivery that had failed was
-- later delivered: the ledger sets both in its UPDATE, and a value equal to
-- the transaction's now() tells it that this very flush made the change,
-- which is when it emits delivery.failed or delivery.recovered. Deliveries
-- that failed before this migration have neither, so their later success
-- emits nothing.
--
-- Nullable columns without a default: catalog changes, no rewrite of any
-- partition.
--
-- Jobs of the earlier operational_webhook kind still queued stay as they
-- are: the dispatcher keeps their worker registered, which sends them to
-- --operational-webhook-url as before (or discards them when it is unset).

ALTER TABLE deliveries ADD COLUMN failed_at timestamptz;
ALTER TABLE deliveries ADD COLUMN recovered_at timestamptz;
