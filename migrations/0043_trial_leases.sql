-- A half-open trial holds a lease on one of its endpoint's trial slots
-- (half_open_concurrency of them, numbered from 0) for as long as its
-- request may run: a row with a random token and an expiry on the
-- database's clock (the attempt's own timeout plus a margin, so the
-- request's deadline ends before the lease). A trial's outcome counts for
-- the breaker only while its row still carries its token; a slot is free
-- when it has no row or its row has expired. The trials in flight are the
-- rows not yet expired. Nothing here depends on a connection or a session:
-- a connection that ends (an idle timeout, a pooler's or a failover's
-- restart, a terminated backend) frees no slot; a dispatcher that dies
-- leaves its row to expire.
--
-- A new table, empty: nothing to rewrite, no lock on any existing table.
-- A low fillfactor keeps a slot's taken-over row on its page.
CREATE TABLE trial_leases (
    endpoint_id text        NOT NULL,
    slot        integer     NOT NULL CHECK (slot >= 0),
    token       text        NOT NULL,
    holder      text        NOT NULL,
    acquired_at timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (endpoint_id, slot)
) WITH (fillfactor = 50);
