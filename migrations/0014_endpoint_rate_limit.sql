-- Endpoint rate limits: rate_limit is the most deliveries per second the
-- whole fleet of dispatchers sends to the endpoint (NULL: no limit). Each
-- dispatcher takes an equal share, counting the live dispatchers in
-- hookd_dispatchers, where every dispatcher refreshes its heartbeat every
-- few seconds and deletes its row on a clean stop.

ALTER TABLE endpoints
    ADD COLUMN rate_limit integer CHECK (rate_limit IS NULL OR rate_limit >= 1);

CREATE TABLE hookd_dispatchers (
    id           text PRIMARY KEY,
    started_at   timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now()
);
