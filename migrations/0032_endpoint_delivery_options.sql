-- Per-endpoint delivery options.
--
-- ordering: 'fifo' sends the endpoint's deliveries one at a time, fleet
-- wide, in the order their messages were accepted; on_exhausted says what
-- a FIFO endpoint does when its head's retries run out ('skip': the head
-- fails and the next goes; 'block': the queue stops until the head is
-- retried or skipped by hand). filter is a condition on the payload and
-- event type (internal/filter) evaluated when a message is accepted: an
-- endpoint it does not match gets no delivery. retry_schedule and
-- timeout_ms replace the dispatcher's --retry-schedule and
-- --request-timeout for the endpoint (NULL: the dispatcher's).
--
-- Columns with constant defaults or none, and checks on the small
-- endpoints table: no rewrite.
ALTER TABLE endpoints
    ADD COLUMN ordering text NOT NULL DEFAULT 'unordered' CHECK (ordering IN ('unordered', 'fifo')),
    ADD COLUMN on_exhausted text NOT NULL DEFAULT 'skip' CHECK (on_exhausted IN ('skip', 'block')),
    ADD COLUMN filter jsonb,
    ADD COLUMN retry_schedule interval[] CHECK (cardinality(retry_schedule) BETWEEN 1 AND 20),
    ADD COLUMN timeout_ms integer CHECK (timeout_ms BETWEEN 1000 AND 60000);

-- A FIFO endpoint's queue is its deliveries themselves: those behind the
-- head wait with no River job (status 'waiting', park_reason 'fifo'), in
-- created_at order, which the existing indexes on deliveries serve. This
-- row, one per endpoint that was ever FIFO, is what serialises the queue:
-- every transaction that adds to it or moves it locks the row first.
-- stamp is the created_at given to the queue's last delivery: the api
-- stamps each new delivery of the endpoint strictly after it, under the
-- lock, so created_at order is the order in which the messages'
-- transactions committed. blocked_by names the failed head that stops an
-- on_exhausted 'block' queue. endpoint_id has deliveries.endpoint_id's
-- collation, so a join from here reads deliveries by its indexes (a "C"
-- column here would make the comparison "C" and rule them out).
CREATE TABLE fifo_queues (
    endpoint_id  text PRIMARY KEY,
    stamp        timestamptz NOT NULL DEFAULT clock_timestamp(),
    blocked_by   text COLLATE "C"
);

-- The attempt log records the timeout each attempt was given. A nullable
-- column without a default: a catalog change on every partition, no
-- rewrite; attempts made before it have none.
ALTER TABLE delivery_attempts ADD COLUMN timeout_ms integer;
