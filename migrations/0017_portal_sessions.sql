-- Tenant portal sessions: an admin opens one for a tenant and hands its URL
-- (which carries a one-time code) to the tenant's browser; the portal page
-- exchanges the code, once, for a session cookie. Only SHA-256 sums of the
-- code and of the cookie's token are stored.

CREATE TABLE portal_sessions (
    id              text PRIMARY KEY,
    tenant_id       text COLLATE "C" NOT NULL,
    read_only       boolean NOT NULL DEFAULT false,
    theme           jsonb NOT NULL DEFAULT '{}',
    code_sha256     bytea NOT NULL UNIQUE,
    code_expires_at timestamptz NOT NULL,
    code_used_at    timestamptz,
    session_sha256  bytea UNIQUE,
    created_by      text NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    expires_at      timestamptz NOT NULL,
    CHECK (expires_at > created_at),
    CHECK ((code_used_at IS NULL) = (session_sha256 IS NULL))
);

CREATE INDEX portal_sessions_expires_idx ON portal_sessions (expires_at);
