-- Enabling an endpoint no longer queues its held deliveries in its own
-- transaction (for an endpoint disabled for days, millions of row locks
-- and jobs at once): it stamps release_held_since, and the dispatchers'
-- unparker releases the held deliveries of an enabled endpoint so stamped,
-- oldest first at a pace, and clears the stamp once none is left. The
-- stamp is how any dispatcher, after any restart, finds the endpoints
-- whose release is unfinished without reading deliveries.
--
-- A nullable column without a default: a catalog change. The partial
-- index holds only the stamped endpoints; endpoints is a small table, so
-- its build blocks their writes for an instant.
ALTER TABLE endpoints ADD COLUMN release_held_since timestamptz;
CREATE INDEX endpoints_release_held_idx ON endpoints (id) WHERE release_held_since IS NOT NULL;

-- An enabled endpoint that still has held deliveries (a message accepted
-- while an enable committed) is stamped, so they are released too.
UPDATE endpoints e SET release_held_since = now()
WHERE e.status = 'enabled' AND e.deleted_at IS NULL
    AND EXISTS (SELECT 1 FROM deliveries d WHERE d.endpoint_id = e.id AND d.status = 'held');
