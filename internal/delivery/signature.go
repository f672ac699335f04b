package delivery

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// Standard Webhooks symmetric secrets: "whsec_" followed by the standard
// base64 encoding of the key.
const (
	// SecretPrefix starts every serialized endpoint signing secret.
	SecretPrefix = "whsec_"
	// MinSecretBytes is the shortest key ParseSecret accepts (192 bits).
	MinSecretBytes = 24
	// MaxSecretBytes is the longest key ParseSecret accepts (512 bits).
	MaxSecretBytes = 64
	// generatedSecretBytes is the key length GenerateSecret produces.
	generatedSecretBytes = 32
	// signatureVersion prefixes every symmetric signature in the header.
	signatureVersion = "v1,"
)

// Errors returned, wrapped with context, by Verify.
var (
	// ErrSignatureMismatch means no v1 signature in the header matches the
	// one computed with the secret.
	ErrSignatureMismatch = errors.New("signature mismatch")
	// ErrTimestampOutOfTolerance means the webhook timestamp is too far from
	// the verifier's clock, in either direction.
	ErrTimestampOutOfTolerance = errors.New("timestamp out of tolerance")
)

// Secret is an endpoint signing secret: "whsec_" followed by the standard
// base64 encoding of 24 to 64 random bytes. Its String and GoString methods
// redact the key so a secret is never printed or logged by accident; Reveal
// returns the real serialized value. The zero Secret has an empty key.
type Secret struct {
	key []byte
}

// ParseSecret parses a serialized "whsec_..." secret. It rejects a missing
// prefix, anything but canonical standard base64 (so every accepted secret
// round-trips through Reveal), and a key shorter than MinSecretBytes or longer
// than MaxSecretBytes. Error messages never include the secret itself.
func ParseSecret(s string) (Secret, error) {
	encoded, ok := strings.CutPrefix(s, SecretPrefix)
	if !ok {
		return Secret{}, fmt.Errorf("parse secret: missing %q prefix", SecretPrefix)
	}
	key, err := base64.StdEncoding.Strict().DecodeString(encoded)
	if err != nil {
		// base64 errors name an offset, never the input.
		return Secret{}, fmt.Errorf("parse secret: key is not valid standard base64: %w", err)
	}
	// The decoder skips newlines; re-encoding catches those and anything else
	// that would not round-trip.
	if base64.StdEncoding.EncodeToString(key) != encoded {
		return Secret{}, errors.New("parse secret: key is not canonical standard base64")
	}
	if len(key) < MinSecretBytes || len(key) > MaxSecretBytes {
		return Secret{}, fmt.Errorf("parse secret: key is %d bytes, want %d to %d",
			len(key), MinSecretBytes, MaxSecretBytes)
	}
	return Secret{key: key}, nil
}

// GenerateSecret returns a new serialized secret made of 32 bytes read from r
// (normally crypto/rand.Reader).
func GenerateSecret(r io.Reader) (string, error) {
	key := make([]byte, generatedSecretBytes)
	if _, err := io.ReadFull(r, key); err != nil {
		return "", fmt.Errorf("generate secret: read random bytes: %w", err)
	}
	return SecretPrefix + base64.StdEncoding.EncodeToString(key), nil
}

// String returns the redacted form "whsec_****", never the key.
func (s Secret) String() string { return SecretPrefix + "****" }

// GoString returns the redacted form, so %#v does not print the key either.
func (s Secret) GoString() string { return "delivery.Secret(" + s.String() + ")" }

// Reveal returns the real serialized secret, "whsec_" plus the base64 key.
// Call it only where the secret must leave the process (showing it to its
// owner once, storing it).
func (s Secret) Reveal() string {
	return SecretPrefix + base64.StdEncoding.EncodeToString(s.key)
}

// signedContent appends the Standard Webhooks signed content,
// "{msgID}.{unix seconds}.{body}", to dst.
func signedContent(dst []byte, msgID string, ts time.Time, body []byte) []byte {
	return append(signedPrefix(dst, msgID, ts), body...)
}

// signedPrefix appends the signed content's head, "{msgID}.{unix
// seconds}.", to dst.
func signedPrefix(dst []byte, msgID string, ts time.Time) []byte {
	dst = append(dst, msgID...)
	dst = append(dst, '.')
	dst = strconv.AppendInt(dst, ts.Unix(), 10)
	return append(dst, '.')
}

// appendSignature appends "v1,<base64 HMAC-SHA256(key, prefix + body)>" to
// dst. The HMAC reads the signed content's head and the body in turn, so the
// body (up to the payload limit, for every delivery) is never copied.
func appendSignature(dst []byte, key, prefix, body []byte) []byte {
	mac := hmac.New(sha256.New, key)
	mac.Write(prefix)
	mac.Write(body)
	var sum [sha256.Size]byte
	dst = append(dst, signatureVersion...)
	return base64.StdEncoding.AppendEncode(dst, mac.Sum(sum[:0]))
}

// Sign returns the webhook-signature header value for one delivery: for each
// secret, in the order given, "v1," followed by the base64 HMAC-SHA256 of
// msgID + "." + unix seconds of ts + "." + body, joined by single spaces.
// With no secrets it returns "".
func Sign(msgID string, ts time.Time, body []byte, secrets ...Secret) string {
	if len(secrets) == 0 {
		return ""
	}
	var buf [128]byte
	prefix := signedPrefix(buf[:0], msgID, ts)
	const encodedLen = len(signatureVersion) + 44 // base64 of 32 bytes
	out := make([]byte, 0, len(secrets)*(encodedLen+1))
	for i, s := range secrets {
		if i > 0 {
			out = append(out, ' ')
		}
		out = appendSignature(out, s.key, prefix, body)
	}
	return string(out)
}

// Verify checks a webhook-signature header against one secret: ts must be
// within tolerance of now (in either direction), and at least one of the
// header's space-separated "v1," signatures must match, compared in constant
// time. Signatures of other versions are skipped. The errors wrap
// ErrTimestampOutOfTolerance or ErrSignatureMismatch.
func Verify(header, msgID string, ts time.Time, body []byte, s Secret, now time.Time, tolerance time.Duration) error {
	if ts.Before(now.Add(-tolerance)) || ts.After(now.Add(tolerance)) {
		return fmt.Errorf("verify webhook %q: timestamp %d, now %d, tolerance %s: %w",
			msgID, ts.Unix(), now.Unix(), tolerance, ErrTimestampOutOfTolerance)
	}
	var buf [128]byte
	prefix := signedPrefix(buf[:0], msgID, ts)
	var sigBuf [64]byte
	want := appendSignature(sigBuf[:0], s.key, prefix, body)[len(signatureVersion):]

	matched := 0
	for sig := range strings.FieldsSeq(header) {
		encoded, ok := strings.CutPrefix(sig, signatureVersion)
		if !ok {
			continue
		}
		matched |= subtle.ConstantTimeCompare([]byte(encoded), want)
	}
	if matched != 1 {
		return fmt.Errorf("verify webhook %q: %w", msgID, ErrSignatureMismatch)
	}
	return nil
}
