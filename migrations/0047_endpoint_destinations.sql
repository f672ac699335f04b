-- Endpoint destinations beyond HTTP (internal/destination).
--
-- type names what the endpoint delivers to: 'http' (its url, as every
-- endpoint stored before this migration does) or a broker, queue or
-- stream. destination is that type's configuration without its
-- credentials (what a read shows); destination_credentials are its
-- write-only fields as one JSON object, sealed like the signing secret
-- (internal/secretbox, bound to the endpoint) when the store has a
-- keyring. An http endpoint has neither.
--
-- A column with a constant default and two nullable ones, and checks on
-- the small endpoints table: no rewrite; existing rows read as 'http'.
ALTER TABLE endpoints
    ADD COLUMN type text NOT NULL DEFAULT 'http'
        CHECK (type IN ('http', 'rabbitmq', 'nats', 'kafka', 'sqs', 'pubsub', 'redis', 'mqtt')),
    ADD COLUMN destination jsonb,
    ADD COLUMN destination_credentials text,
    ADD CONSTRAINT endpoints_destination_of_type CHECK ((type = 'http') = (destination IS NULL));
