package api_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery"
)

// TestEd25519Endpoint: an endpoint created with ed25519 signing gets a
// generated key pair; GET .../secret serves its whpk_ public key; rotation
// shows the new and the previous public key; the private key is in no
// answer.
func TestEd25519Endpoint(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	created := b.do(t, "POST", "/v1/endpoints", map[string]any{"tenant_id": "acme", "url": "https://acme.example/h", "signing": "ed25519"})
	requireStatus(t, http.StatusCreated, created)
	ep := decodeJSON[endpointJSON](t, created)
	require.Equal(t, "ed25519", ep.Signing)
	stored, err := b.store.GetEndpoint(context.Background(), ep.ID)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(stored.Secret, "whsk_"))
	first, err := delivery.PublicKeyOf(stored.Secret)
	require.NoError(t, err)

	s := decodeJSON[secretJSON](t, b.do(t, "GET", "/v1/endpoints/"+ep.ID+"/secret", nil))
	require.Equal(t, secretJSON{Signing: "ed25519", Secret: first}, s)

	rotated := b.do(t, "POST", "/v1/endpoints/"+ep.ID+"/secret/rotate", nil)
	requireStatus(t, http.StatusOK, rotated)
	require.Equal(t, "ed25519", decodeJSON[endpointJSON](t, rotated).Signing)
	s = decodeJSON[secretJSON](t, b.do(t, "GET", "/v1/endpoints/"+ep.ID+"/secret", nil))
	require.True(t, strings.HasPrefix(s.Secret, "whpk_"))
	require.NotEqual(t, first, s.Secret)
	require.NotNil(t, s.PreviousSecret)
	require.Equal(t, first, *s.PreviousSecret)
	require.NotNil(t, s.PreviousSecretExpiresAt)

	after, err := b.store.GetEndpoint(context.Background(), ep.ID)
	require.NoError(t, err)
	for _, r := range []*response{created, rotated, b.do(t, "GET", "/v1/endpoints/"+ep.ID, nil), b.do(t, "GET", "/v1/endpoints", nil),
		b.do(t, "GET", "/v1/endpoints/"+ep.ID+"/secret", nil)} {
		for _, private := range []string{stored.Secret, after.Secret} {
			require.NotContains(t, string(r.Body), strings.TrimPrefix(private, "whsk_")[:24])
		}
	}

	// HMAC stays the default, and its secret route is unchanged.
	mac := b.createEndpoint(t, "acme")
	require.Equal(t, "hmac", mac.Signing)
	s = decodeJSON[secretJSON](t, b.do(t, "GET", "/v1/endpoints/"+mac.ID+"/secret", nil))
	require.Equal(t, "hmac", s.Signing)
	require.True(t, strings.HasPrefix(s.Secret, "whsec_"))
}

func TestSigningRefused(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	r := b.do(t, "POST", "/v1/endpoints", map[string]any{"tenant_id": "acme", "url": "https://acme.example/h", "signing": "rsa"})
	requireFieldError(t, http.StatusBadRequest, r, "signing")
	r = b.do(t, "POST", "/v1/endpoints", map[string]any{"tenant_id": "acme", "url": "https://acme.example/h", "signing": "ed25519",
		"secret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, docBlind("the document cannot tie secret to signing"))
	requireFieldError(t, http.StatusBadRequest, r, "secret")
	r = b.do(t, "PATCH", "/v1/endpoints/"+b.createEndpoint(t, "acme").ID, map[string]any{"signing": "ed25519"})
	requireFieldError(t, http.StatusBadRequest, r, "signing")
	require.Equal(t, 1, b.counts(t)["endpoints"])
}
