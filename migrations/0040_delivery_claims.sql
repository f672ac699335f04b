-- A job that River runs again (a retry, or rescued from a dispatcher that
-- stalled or died) claims the deliveries it still owns before it sends:
-- claim_job and claim_attempt are the job and River's attempt number of
-- the latest run that claimed the delivery. Every write a run makes to a
-- delivery (the ledger's status updates, a hand-off) names its job and
-- attempt, and applies only when no later run of the same job claimed the
-- delivery: a run that lost its job (rescued elsewhere while it was
-- frozen) sends nothing more and writes nothing. A first run claims
-- nothing (no write on the hot path); a claim of another job is ignored,
-- so nothing needs resetting when a delivery gets a new job.
--
-- Nullable columns without a default: a catalogue change on the
-- partitioned table and every partition, no rewrite, a brief ACCESS
-- EXCLUSIVE lock.
ALTER TABLE deliveries
    ADD COLUMN claim_job bigint,
    ADD COLUMN claim_attempt integer;
