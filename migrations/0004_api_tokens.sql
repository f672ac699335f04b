-- Stored API tokens: `api token create` prints a token once and keeps only
-- its SHA-256 here. A token is live until revoked; its name is unique among
-- live tokens (a revoked token's name can be reused) and is what audit
-- records (breaker resets, endpoint enables) name as the actor.

CREATE TABLE api_tokens (
    id            text COLLATE "C" PRIMARY KEY,
    name          text COLLATE "C" NOT NULL,
    sha256        bytea NOT NULL CHECK (octet_length(sha256) = 32),
    created_at    timestamptz NOT NULL DEFAULT now(),
    -- Updated at most once a minute per token (see store.AuthenticateToken).
    last_used_at  timestamptz,
    revoked_at    timestamptz
);

-- Authentication looks a presented token up by its hash.
CREATE UNIQUE INDEX api_tokens_sha256_idx ON api_tokens (sha256);

CREATE UNIQUE INDEX api_tokens_live_name_idx ON api_tokens (name) WHERE revoked_at IS NULL;
