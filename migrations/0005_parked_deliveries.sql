-- Deliveries refused by an open breaker are parked: status 'waiting' with no
-- River job, so a dead endpoint's backlog costs the queue nothing until its
-- breaker lets traffic through again, when they are released in creation
-- order. series_base is the attempt count when the current series began, so
-- a released delivery keeps its place in the retry schedule.

ALTER TABLE deliveries ADD COLUMN series_base integer NOT NULL DEFAULT 0;

CREATE INDEX deliveries_parked_idx ON deliveries (endpoint_id, created_at, id)
    WHERE status = 'waiting' AND job_id IS NULL;
