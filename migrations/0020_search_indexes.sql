-- Indexes for searching messages and deliveries (GET /v1/messages,
-- GET /v1/deliveries). Every search reads newest first by id within an id
-- range (its time range), so each index ends in id: a filter walks its
-- index backwards from the cursor and stops after a page.
--
-- Filters already served: messages by tenant (messages_tenant_id_idx),
-- deliveries by message (deliveries_message_id_idx), by endpoint
-- (deliveries_endpoint_status_idx) and the unfinished statuses
-- (deliveries_unfinished_idx). A delivered delivery is most of an
-- interval, so the primary key serves that status.

CREATE INDEX messages_event_type_idx ON messages (event_type, id);

CREATE INDEX deliveries_tenant_id_idx ON deliveries (tenant_id, id);

-- The dead letters an operator looks for and retries: small next to the
-- delivered rows.
CREATE INDEX deliveries_final_idx ON deliveries (id) WHERE status IN ('failed', 'expired');
