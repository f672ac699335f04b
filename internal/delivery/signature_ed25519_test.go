package delivery_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/store"
)

// rfc8032Test1 is TEST 1 of RFC 8032 section 7.1: a published Ed25519 key
// pair and the signature of the empty message.
var rfc8032Test1 = struct{ seed, public, emptySignature string }{
	seed:           "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
	public:         "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
	emptySignature: "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b",
}

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	require.NoError(t, err)
	return b
}

// verifyV1a is a receiver's check written from the Standard Webhooks spec
// alone: split the header on spaces, take each "v1a," signature, and
// verify it with the raw public key over "{msg_id}.{timestamp}.{body}".
func verifyV1a(header string, public ed25519.PublicKey, msgID, timestamp string, body []byte) bool {
	content := []byte(msgID + "." + timestamp + "." + string(body))
	for _, part := range strings.Split(header, " ") {
		sig, ok := strings.CutPrefix(part, "v1a,")
		if !ok {
			continue
		}
		raw, err := base64.StdEncoding.DecodeString(sig)
		if err == nil && ed25519.Verify(public, content, raw) {
			return true
		}
	}
	return false
}

// TestEd25519KeysFromThePublishedVector: a whsk_ key holding RFC 8032's
// TEST 1 pair parses, shows the vector's public key as whpk_, and signs
// webhooks a receiver verifies with that public key alone; the vector's
// own signature checks out with the same verifier primitive.
func TestEd25519KeysFromThePublishedVector(t *testing.T) {
	t.Parallel()
	seed, public := unhex(t, rfc8032Test1.seed), unhex(t, rfc8032Test1.public)
	require.True(t, ed25519.Verify(public, nil, unhex(t, rfc8032Test1.emptySignature)), "the published vector verifies")

	serialized := "whsk_" + base64.StdEncoding.EncodeToString(append(append([]byte{}, seed...), public...))
	key, err := delivery.ParsePrivateKey(serialized)
	require.NoError(t, err)
	require.Equal(t, "whpk_"+base64.StdEncoding.EncodeToString(public), key.PublicKey())
	require.Equal(t, "whpk_11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=", key.PublicKey())
	require.Equal(t, serialized, key.Reveal())

	ts := time.Unix(1_674_087_231, 0)
	const msgID = "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W"
	body := []byte(`{"type":"contact.created","timestamp":"2022-11-03T20:26:10.344522Z","data":{"id":"1f81eb52-5198-4599-803e-771906343485"}}`)
	header := delivery.SignEd25519(msgID, ts, body, key)
	require.True(t, strings.HasPrefix(header, "v1a,"))
	require.NotContains(t, header, " ")
	require.True(t, verifyV1a(header, public, msgID, "1674087231", body))
	// Ed25519 is deterministic: the signature is the one any correct
	// implementation makes with the vector's key.
	want := ed25519.Sign(ed25519.NewKeyFromSeed(seed), []byte(msgID+".1674087231."+string(body)))
	require.Equal(t, "v1a,"+base64.StdEncoding.EncodeToString(want), header)

	// Any change to what is signed fails.
	require.False(t, verifyV1a(header, public, msgID, "1674087232", body))
	require.False(t, verifyV1a(header, public, "msg_other", "1674087231", body))
	require.False(t, verifyV1a(header, public, msgID, "1674087231", append(bytes.Clone(body), ' ')))
}

// TestEd25519RotationSignsWithBoth: during a rotation's overlap the header
// holds one v1a signature per key, each verifying with its own public key.
func TestEd25519RotationSignsWithBoth(t *testing.T) {
	t.Parallel()
	var keys []delivery.PrivateKey
	var publics []ed25519.PublicKey
	for i := range 2 {
		s, err := delivery.GeneratePrivateKey(bytes.NewReader(bytes.Repeat([]byte{byte(i + 1)}, 32)))
		require.NoError(t, err)
		k, err := delivery.ParsePrivateKey(s)
		require.NoError(t, err)
		raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(k.PublicKey(), "whpk_"))
		require.NoError(t, err)
		keys, publics = append(keys, k), append(publics, raw)
	}
	ts := time.Unix(1_700_000_000, 0)
	header := delivery.SignEd25519("msg_1", ts, []byte(`{}`), keys...)
	parts := strings.Split(header, " ")
	require.Len(t, parts, 2)
	for i, p := range publics {
		require.True(t, verifyV1a(parts[i], p, "msg_1", "1700000000", []byte(`{}`)), "key %d", i)
		require.False(t, verifyV1a(parts[1-i], p, "msg_1", "1700000000", []byte(`{}`)), "key %d", i)
	}
	require.Empty(t, delivery.SignEd25519("msg_1", ts, nil))
}

func TestParsePrivateKeyRefuses(t *testing.T) {
	t.Parallel()
	good, err := delivery.GeneratePrivateKey(bytes.NewReader(bytes.Repeat([]byte{7}, 32)))
	require.NoError(t, err)
	raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(good, "whsk_"))
	require.NoError(t, err)
	other := bytes.Clone(raw)
	other[40] ^= 1
	for name, s := range map[string]string{
		"no prefix":         strings.TrimPrefix(good, "whsk_"),
		"secret prefix":     "whsec_" + strings.TrimPrefix(good, "whsk_"),
		"seed only":         "whsk_" + base64.StdEncoding.EncodeToString(raw[:32]),
		"mismatched public": "whsk_" + base64.StdEncoding.EncodeToString(other),
		"url base64":        "whsk_" + base64.URLEncoding.EncodeToString(raw),
		"not base64":        "whsk_!!!",
	} {
		_, err := delivery.ParsePrivateKey(s)
		require.Error(t, err, name)
		require.NotContains(t, err.Error(), strings.TrimPrefix(good, "whsk_")[:16], name)
	}
	k, err := delivery.ParsePrivateKey(good)
	require.NoError(t, err)
	require.Equal(t, "whsk_****", k.String())
	require.NotContains(t, fmt.Sprintf("%v %+v %#v %s", k, k, k, k), strings.TrimPrefix(good, "whsk_")[:16])
}

// endpointsOf is an EndpointLoader over fixed endpoints.
type endpointsOf map[string]store.Endpoint

func (m endpointsOf) GetEndpoints(_ context.Context, ids []string) (map[string]store.Endpoint, error) {
	out := map[string]store.Endpoint{}
	for _, id := range ids {
		if e, ok := m[id]; ok {
			out[id] = e
		}
	}
	return out, nil
}

// TestTargetSignsTheEndpointsWay: an Ed25519 endpoint's attempts carry
// v1a signatures by its key, and by its previous key until the overlap
// ends; an HMAC endpoint's carry v1 signatures.
func TestTargetSignsTheEndpointsWay(t *testing.T) {
	t.Parallel()
	cur, err := delivery.GeneratePrivateKey(bytes.NewReader(bytes.Repeat([]byte{1}, 32)))
	require.NoError(t, err)
	prev, err := delivery.GeneratePrivateKey(bytes.NewReader(bytes.Repeat([]byte{2}, 32)))
	require.NoError(t, err)
	expires := time.Unix(1_700_000_100, 0)
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	cache := delivery.NewEndpointCache(endpointsOf{
		"ep_ed":  {ID: "ep_ed", Signing: store.SigningEd25519, Secret: cur, PreviousSecret: prev, PreviousSecretExpiresAt: &expires},
		"ep_mac": {ID: "ep_mac", Signing: store.SigningHMAC, Secret: secret},
	}, time.Minute, time.Now)
	public := func(s string) ed25519.PublicKey {
		pk, err := delivery.PublicKeyOf(s)
		require.NoError(t, err)
		raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(pk, "whpk_"))
		require.NoError(t, err)
		return raw
	}
	ed, err := cache.Get(context.Background(), "ep_ed")
	require.NoError(t, err)
	body := []byte(`{"a":1}`)
	during := ed.Signature("msg_1", expires.Add(-time.Second), body)
	ts := strconv.FormatInt(expires.Add(-time.Second).Unix(), 10)
	require.Len(t, strings.Split(during, " "), 2)
	require.True(t, verifyV1a(during, public(cur), "msg_1", ts, body))
	require.True(t, verifyV1a(during, public(prev), "msg_1", ts, body))
	after := ed.Signature("msg_1", expires, body)
	ts = strconv.FormatInt(expires.Unix(), 10)
	require.True(t, verifyV1a(after, public(cur), "msg_1", ts, body))
	require.False(t, verifyV1a(after, public(prev), "msg_1", ts, body), "the previous key stops at the overlap's end")

	mac, err := cache.Get(context.Background(), "ep_mac")
	require.NoError(t, err)
	s, err := delivery.ParseSecret(secret)
	require.NoError(t, err)
	at := time.Unix(1_700_000_000, 0)
	header := mac.Signature("msg_1", at, body)
	require.True(t, strings.HasPrefix(header, "v1,"))
	require.NoError(t, delivery.Verify(header, "msg_1", at, body, s, at, time.Minute))
}
