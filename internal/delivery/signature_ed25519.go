package delivery

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// Standard Webhooks asymmetric keys: "whsk_" and the standard base64 of an
// Ed25519 private key (its 32-byte seed, then its 32-byte public key, as
// crypto/ed25519 and libsodium lay it out), "whpk_" and the standard base64
// of the 32-byte public key.
const (
	// PrivateKeyPrefix starts every serialized Ed25519 private key.
	PrivateKeyPrefix = "whsk_"
	// PublicKeyPrefix starts every serialized Ed25519 public key.
	PublicKeyPrefix = "whpk_"
	// asymmetricSignatureVersion prefixes every Ed25519 signature in the
	// header.
	asymmetricSignatureVersion = "v1a,"
)

// PrivateKey is an endpoint's Ed25519 signing key. Like Secret, its String
// and GoString methods redact it; Reveal returns the serialized key, which
// is only ever stored, never shown.
type PrivateKey struct {
	key ed25519.PrivateKey
}

// ParsePrivateKey parses a serialized "whsk_..." key: canonical standard
// base64 of 64 bytes whose second half is the public key of the first.
// Error messages never include the key.
func ParsePrivateKey(s string) (PrivateKey, error) {
	encoded, ok := strings.CutPrefix(s, PrivateKeyPrefix)
	if !ok {
		return PrivateKey{}, fmt.Errorf("parse private key: missing %q prefix", PrivateKeyPrefix)
	}
	raw, err := base64.StdEncoding.Strict().DecodeString(encoded)
	if err != nil || base64.StdEncoding.EncodeToString(raw) != encoded {
		return PrivateKey{}, errors.New("parse private key: not canonical standard base64")
	}
	if len(raw) != ed25519.PrivateKeySize {
		return PrivateKey{}, fmt.Errorf("parse private key: %d bytes, want %d", len(raw), ed25519.PrivateKeySize)
	}
	key := ed25519.NewKeyFromSeed(raw[:ed25519.SeedSize])
	if !bytes.Equal(key, raw) {
		return PrivateKey{}, errors.New("parse private key: the public half does not match the seed")
	}
	return PrivateKey{key: key}, nil
}

// GeneratePrivateKey returns a new serialized private key made from 32
// bytes read from r (normally crypto/rand.Reader).
func GeneratePrivateKey(r io.Reader) (string, error) {
	seed := make([]byte, ed25519.SeedSize)
	if _, err := io.ReadFull(r, seed); err != nil {
		return "", fmt.Errorf("generate private key: read random bytes: %w", err)
	}
	return PrivateKey{key: ed25519.NewKeyFromSeed(seed)}.Reveal(), nil
}

// String returns the redacted form "whsk_****", never the key.
func (k PrivateKey) String() string { return PrivateKeyPrefix + "****" }

// GoString returns the redacted form, so %#v does not print the key either.
func (k PrivateKey) GoString() string { return "delivery.PrivateKey(" + k.String() + ")" }

// Reveal returns the serialized private key. Call it only to store it.
func (k PrivateKey) Reveal() string {
	return PrivateKeyPrefix + base64.StdEncoding.EncodeToString(k.key)
}

// PublicKey returns the serialized public key, "whpk_" and its base64:
// what a receiver verifies with.
func (k PrivateKey) PublicKey() string {
	pub, _ := k.key.Public().(ed25519.PublicKey)
	return PublicKeyPrefix + base64.StdEncoding.EncodeToString(pub)
}

// PublicKeyOf returns the serialized public key of a serialized private key.
func PublicKeyOf(privateKey string) (string, error) {
	k, err := ParsePrivateKey(privateKey)
	if err != nil {
		return "", err
	}
	return k.PublicKey(), nil
}

// SignEd25519 returns the webhook-signature header value for one delivery:
// for each key, in the order given, "v1a," followed by the base64 Ed25519
// signature of msgID + "." + unix seconds of ts + "." + body (the content
// Sign signs), joined by single spaces. With no keys it returns "".
func SignEd25519(msgID string, ts time.Time, body []byte, keys ...PrivateKey) string {
	if len(keys) == 0 {
		return ""
	}
	content := signedContent(make([]byte, 0, len(msgID)+len(body)+24), msgID, ts, body)
	const encodedLen = len(asymmetricSignatureVersion) + 88 // base64 of 64 bytes
	out := make([]byte, 0, len(keys)*(encodedLen+1))
	for i, k := range keys {
		if i > 0 {
			out = append(out, ' ')
		}
		out = append(out, asymmetricSignatureVersion...)
		out = base64.StdEncoding.AppendEncode(out, ed25519.Sign(k.key, content))
	}
	return string(out)
}
