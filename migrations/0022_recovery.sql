-- A parked delivery (status 'waiting', no job) says why it waits:
-- park_reason is NULL for one refused by an open or isolated breaker, and
-- 'recover' for a failed delivery queued again by
-- POST /v1/endpoints/{id}/recover. The dispatcher's unparker releases both
-- the same way, oldest first at a pace; the reason lets the api tell that
-- an endpoint's recovery is still being released. Releasing a delivery
-- clears it.
--
-- A nullable column without a default: a catalog change, no rewrite of any
-- partition.

ALTER TABLE deliveries ADD COLUMN park_reason text;
