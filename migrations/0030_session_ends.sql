-- Sessions that can be ended before their expiry.
--
-- A portal session records the id of the token that opened it (revoking
-- that token ends it) and when it was ended: by the tenant's logout, by an
-- admin (DELETE /v1/portal-sessions/{id}) or by the revoke. Sessions
-- opened before this migration take the id of the live token of their
-- creator's name, when there is one (the bootstrap token has none).
--
-- Dashboard sessions were only signed cookies, bound to their token's
-- name: a revoked token's sessions came back when a new token took the
-- name, and a logout could not end a copied cookie. Each is now a row,
-- bound to its token's id ('bootstrap' for API_TOKEN), that a logout ends;
-- the cookie stays signed, so a forged one costs no lookup. Cookies signed
-- before this migration have no row and log in again.
--
-- portal_sessions holds a day of sessions and dashboard_sessions starts
-- empty, so the index builds are short.

ALTER TABLE portal_sessions
    ADD COLUMN created_by_token_id text COLLATE "C",
    ADD COLUMN ended_at timestamptz;

UPDATE portal_sessions p SET created_by_token_id = t.id
FROM api_tokens t
WHERE t.name = p.created_by AND t.scope = 'admin' AND t.revoked_at IS NULL;

-- GET /v1/tenants/{tenant_id}/portal-sessions lists a tenant's sessions
-- in id order; a revoke ends the sessions of one token.
CREATE INDEX portal_sessions_tenant_idx ON portal_sessions (tenant_id, id);
CREATE INDEX portal_sessions_token_idx ON portal_sessions (created_by_token_id) WHERE ended_at IS NULL;

CREATE TABLE dashboard_sessions (
    -- The signed cookie's session id: 128 random bits, base64url.
    id          text COLLATE "C" PRIMARY KEY,
    -- The token the session was opened with: a stored token's id,
    -- 'bootstrap' for API_TOKEN, NULL for a token of a plugged-in
    -- authenticator that has no ids.
    token_id    text COLLATE "C",
    name        text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    ended_at    timestamptz,
    CHECK (expires_at > created_at)
);

CREATE INDEX dashboard_sessions_expires_idx ON dashboard_sessions (expires_at);
