-- Tables rewritten at delivery rate get vacuumed sooner than PostgreSQL's
-- defaults (20% of the table dead before a vacuum): River's job table
-- (each job row is written three times: inserted, running, completed) and
-- the deliveries table. Without it, at sustained load the job table grew
-- to 1 GB with 440,000 dead tuples in two minutes (make bench, S3), and
-- every insert queued on the lock that extends it.
ALTER TABLE river_job SET (
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_insert_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 1
);
ALTER TABLE deliveries SET (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_insert_scale_factor = 0.05
);
ALTER TABLE breaker_buckets SET (
    autovacuum_vacuum_scale_factor = 0.02
);
