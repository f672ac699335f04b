-- A rate-limited endpoint's send slots are booked in one ledger row for
-- the whole fleet: next_slot is the earliest time the next delivery to the
-- endpoint may go (a theoretical arrival time). A booking takes
-- greatest(next_slot, now) and moves next_slot one interval
-- (1 / rate_limit seconds) past it, in one UPDATE, so slots are spaced by
-- the interval across every dispatcher, whatever the fleet's size: the
-- limit is a ceiling by construction. Only endpoints with a rate_limit
-- have a row (made by their first booking).
--
-- A new table, empty: nothing to rewrite. A low fillfactor keeps each
-- booking's new row version on its page (a HOT update: no index write).
CREATE TABLE endpoint_rate_slots (
    endpoint_id text PRIMARY KEY,
    next_slot   timestamptz NOT NULL
) WITH (fillfactor = 50);
