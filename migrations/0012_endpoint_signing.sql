-- Endpoint signing schemes: 'hmac' (Standard Webhooks v1, HMAC-SHA256 with
-- the whsec_ secret) or 'ed25519' (v1a, with a whsk_ private key kept in
-- the secret columns; only its whpk_ public key is ever shown). Endpoints
-- stored before this migration sign with HMAC, as they always did.

ALTER TABLE endpoints
    ADD COLUMN signing text NOT NULL DEFAULT 'hmac' CHECK (signing IN ('hmac', 'ed25519'));
