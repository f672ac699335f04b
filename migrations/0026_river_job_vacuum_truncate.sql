-- Vacuum leaves River's job table at its size instead of truncating its
-- empty tail. A delivery's job is deleted when the delivery ends (the
-- ledger's transaction), so the newest pages empty as fast as they fill
-- and every autovacuum of river_job found a tail to cut. Truncation holds
-- ACCESS EXCLUSIVE on the table, which stops every insert, fetch and
-- completion of the queue while vacuum scans the tail backwards (10-32 ms
-- waits logged at 2,000 deliveries/s) and replays as the same lock on
-- every replica. The freed pages are reused by the next jobs instead.
ALTER TABLE river_job SET (vacuum_truncate = false);
