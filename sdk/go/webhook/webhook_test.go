package webhook_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/sdk/go/webhook"
)

var now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func newHMACSecret(t *testing.T) string {
	t.Helper()
	b := make([]byte, 32)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return "whsec_" + base64.StdEncoding.EncodeToString(b)
}

// hmacSignature signs as a Standard Webhooks sender does, with the
// reference library.
func hmacSignature(t *testing.T, secret, id string, ts time.Time, body []byte) string {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	require.NoError(t, err)
	sig, err := wh.Sign(id, ts, body)
	require.NoError(t, err)
	return sig
}

func ed25519Signature(priv ed25519.PrivateKey, id string, ts time.Time, body []byte) string {
	signed := append([]byte(id+"."+strconv.FormatInt(ts.Unix(), 10)+"."), body...)
	return "v1a," + base64.StdEncoding.EncodeToString(ed25519.Sign(priv, signed))
}

func headers(id string, ts time.Time, sig string) http.Header {
	h := http.Header{}
	h.Set(webhook.HeaderID, id)
	h.Set(webhook.HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	h.Set(webhook.HeaderSignature, sig)
	return h
}

func TestVerify(t *testing.T) {
	t.Parallel()
	secret, oldSecret := newHMACSecret(t), newHMACSecret(t)
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	publicKey := "whpk_" + base64.StdEncoding.EncodeToString(pub)
	_, otherPriv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)

	body := []byte(`{"invoice":"in_1","amount":4200}`)
	const id = "msg_01J0000000000000000000000"
	for _, tc := range []struct {
		name   string
		keys   []string
		header http.Header
		body   []byte
		want   error
	}{
		{"hmac", []string{secret}, headers(id, now, hmacSignature(t, secret, id, now, body)), body, nil},
		{"ed25519", []string{publicKey}, headers(id, now, ed25519Signature(priv, id, now, body)), body, nil},
		{"the previous secret during a rotation", []string{secret, oldSecret},
			headers(id, now, hmacSignature(t, oldSecret, id, now, body)), body, nil},
		{"two signatures, the second matching", []string{publicKey},
			headers(id, now, ed25519Signature(otherPriv, id, now, body)+" "+ed25519Signature(priv, id, now, body)), body, nil},
		{"an hmac and an ed25519 key", []string{secret, publicKey}, headers(id, now, ed25519Signature(priv, id, now, body)), body, nil},
		{"within the tolerance", []string{secret}, headers(id, now.Add(-4*time.Minute), hmacSignature(t, secret, id, now.Add(-4*time.Minute), body)), body, nil},
		{"a changed body", []string{secret}, headers(id, now, hmacSignature(t, secret, id, now, body)), []byte(`{"invoice":"in_1","amount":1}`), webhook.ErrNoMatchingSignature},
		{"another id", []string{secret}, headers("msg_other", now, hmacSignature(t, secret, id, now, body)), body, webhook.ErrNoMatchingSignature},
		{"another secret", []string{oldSecret}, headers(id, now, hmacSignature(t, secret, id, now, body)), body, webhook.ErrNoMatchingSignature},
		{"another key pair", []string{publicKey}, headers(id, now, ed25519Signature(otherPriv, id, now, body)), body, webhook.ErrNoMatchingSignature},
		{"an hmac signature checked with a public key", []string{publicKey}, headers(id, now, hmacSignature(t, secret, id, now, body)), body, webhook.ErrNoMatchingSignature},
		{"garbage", []string{publicKey, secret}, headers(id, now, "v1a,!!! v1,??? v2,x nothing"), body, webhook.ErrNoMatchingSignature},
		{"too old", []string{secret}, headers(id, now.Add(-6*time.Minute), hmacSignature(t, secret, id, now.Add(-6*time.Minute), body)), body, webhook.ErrTooOld},
		{"too new", []string{secret}, headers(id, now.Add(6*time.Minute), hmacSignature(t, secret, id, now.Add(6*time.Minute), body)), body, webhook.ErrTooNew},
		{"no signature", []string{secret}, headers(id, now, ""), body, webhook.ErrMissingHeaders},
		{"no id", []string{secret}, headers("", now, hmacSignature(t, secret, id, now, body)), body, webhook.ErrMissingHeaders},
		{"a timestamp that is no number", []string{secret}, func() http.Header {
			h := headers(id, now, hmacSignature(t, secret, id, now, body))
			h.Set(webhook.HeaderTimestamp, "yesterday")
			return h
		}(), body, webhook.ErrBadTimestamp},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			v, err := webhook.NewVerifier(tc.keys, webhook.WithClock(func() time.Time { return now }))
			require.NoError(t, err)
			err = v.Verify(tc.header, tc.body)
			if tc.want == nil {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, tc.want)
			}
		})
	}
}

func TestWithTolerance(t *testing.T) {
	t.Parallel()
	secret := newHMACSecret(t)
	body := []byte(`1`)
	sent := now.Add(-30 * time.Second)
	h := headers("msg_1", sent, hmacSignature(t, secret, "msg_1", sent, body))
	strict, err := webhook.NewVerifier([]string{secret}, webhook.WithTolerance(10*time.Second), webhook.WithClock(func() time.Time { return now }))
	require.NoError(t, err)
	require.ErrorIs(t, strict.Verify(h, body), webhook.ErrTooOld)
	loose, err := webhook.NewVerifier([]string{secret}, webhook.WithTolerance(time.Minute), webhook.WithClock(func() time.Time { return now }))
	require.NoError(t, err)
	require.NoError(t, loose.Verify(h, body))
}

func TestNewVerifierRefusesBadKeys(t *testing.T) {
	t.Parallel()
	for _, keys := range [][]string{
		nil,
		{"secret"},
		{"whsec_not base64!"},
		{"whpk_" + base64.StdEncoding.EncodeToString([]byte("short"))},
		{"whpk_@@@"},
	} {
		_, err := webhook.NewVerifier(keys)
		require.Error(t, err, "%q", keys)
	}
}

func TestVerifyRequest(t *testing.T) {
	t.Parallel()
	secret := newHMACSecret(t)
	body := []byte(`{"n":1}`)
	ts := time.Now()
	v, err := webhook.NewVerifier([]string{secret})
	require.NoError(t, err)

	req := httptest.NewRequest(http.MethodPost, "/hooks", bytes.NewReader(body))
	req.Header = headers("msg_1", ts, hmacSignature(t, secret, "msg_1", ts, body))
	got, err := v.VerifyRequest(req)
	require.NoError(t, err)
	require.Equal(t, body, got)
	again, err := io.ReadAll(req.Body)
	require.NoError(t, err)
	require.Equal(t, body, again, "the body can be read again")

	big := bytes.Repeat([]byte("x"), webhook.MaxBodySize+1)
	req = httptest.NewRequest(http.MethodPost, "/hooks", bytes.NewReader(big))
	req.Header = headers("msg_1", ts, hmacSignature(t, secret, "msg_1", ts, big))
	_, err = v.VerifyRequest(req)
	require.Error(t, err)
}
