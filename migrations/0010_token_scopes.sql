-- Token scopes: a token is either an admin token (every tenant, and the
-- operational routes) or a tenant token bound to one tenant_id. Either may
-- be read-only (every write refused) and may expire. Tokens stored before
-- this migration are admin tokens without expiry, as they always were.

ALTER TABLE api_tokens
    ADD COLUMN scope      text NOT NULL DEFAULT 'admin' CHECK (scope IN ('admin', 'tenant')),
    ADD COLUMN tenant_id  text COLLATE "C",
    ADD COLUMN read_only  boolean NOT NULL DEFAULT false,
    ADD COLUMN expires_at timestamptz,
    ADD CONSTRAINT api_tokens_tenant_scope_check CHECK ((scope = 'tenant') = (tenant_id IS NOT NULL)),
    ADD CONSTRAINT api_tokens_expiry_check CHECK (expires_at IS NULL OR expires_at > created_at);
