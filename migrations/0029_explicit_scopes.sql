-- A principal's scope is explicit: an admin token has scope 'admin' and no
-- tenant, a tenant token scope 'tenant' and a tenant id that is not empty,
-- and a portal session (which acts as a tenant token) a tenant id that is
-- not empty. The check of 0010 let a tenant token hold '' as its tenant,
-- which the api then read as an admin.
--
-- Neither the api nor `api token create` ever stored such a row (both
-- refuse an empty tenant); one stored by hand is revoked here and recorded
-- as what it acted as, an admin token, and such a portal session is ended.
-- Both tables are small (tokens, and sessions of the last day), so the
-- checks' scans under the lock are short.

UPDATE api_tokens SET scope = 'admin', tenant_id = NULL, revoked_at = coalesce(revoked_at, now())
WHERE scope = 'tenant' AND tenant_id = '';

ALTER TABLE api_tokens
    ADD CONSTRAINT api_tokens_tenant_not_empty_check CHECK (tenant_id <> '');

DELETE FROM portal_sessions WHERE tenant_id = '';

ALTER TABLE portal_sessions
    ADD CONSTRAINT portal_sessions_tenant_not_empty_check CHECK (tenant_id <> '');
