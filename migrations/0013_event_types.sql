-- The event type catalogue: every event type an operator registered, with
-- an optional JSON Schema (draft 2020-12) of its payloads. It is global,
-- not per tenant. Archived types stay for the messages that name them; the
-- api's strict mode refuses new messages of an archived or unknown type.

CREATE TABLE event_types (
    name         text COLLATE "C" PRIMARY KEY,
    description  text NOT NULL DEFAULT '',
    schema       jsonb,
    archived     boolean NOT NULL DEFAULT false,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now()
);
