// Package webhook verifies the webhooks hookd delivers: their Standard
// Webhooks signatures (webhook-id, webhook-timestamp and webhook-signature
// headers), HMAC-SHA256 ("v1,") with an endpoint's whsec_ secret or
// Ed25519 ("v1a,") with its whpk_ public key, and a timestamp within the
// tolerance of the receiver's clock.
//
// HMAC signatures are checked by the Standard Webhooks reference library;
// Ed25519 ones by crypto/ed25519.
package webhook

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// The headers hookd signs every delivery with.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// DefaultTolerance is how far a webhook's timestamp may be from the
// receiver's clock, either way.
const DefaultTolerance = 5 * time.Minute

// MaxBodySize is the most VerifyRequest reads of a body: hookd sends at
// most 1 MiB payloads by default.
const MaxBodySize = 8 << 20

// Errors of Verify, to test with errors.Is.
var (
	// ErrMissingHeaders: a webhook-* header is absent.
	ErrMissingHeaders = errors.New("webhook: missing webhook-id, webhook-timestamp or webhook-signature")
	// ErrBadTimestamp: the timestamp is not Unix seconds.
	ErrBadTimestamp = errors.New("webhook: webhook-timestamp is not a Unix time")
	// ErrTooOld and ErrTooNew: the timestamp is outside the tolerance.
	ErrTooOld = errors.New("webhook: timestamp too old")
	ErrTooNew = errors.New("webhook: timestamp too new")
	// ErrNoMatchingSignature: no signature checks out with any key.
	ErrNoMatchingSignature = errors.New("webhook: no matching signature")
)

// Verifier checks webhooks against an endpoint's keys. It is safe for
// concurrent use.
type Verifier struct {
	hmac      []*standardwebhooks.Webhook
	ed25519   []ed25519.PublicKey
	tolerance time.Duration
	now       func() time.Time
}

// Option configures a Verifier.
type Option func(*Verifier)

// WithTolerance replaces DefaultTolerance.
func WithTolerance(d time.Duration) Option { return func(v *Verifier) { v.tolerance = d } }

// WithClock replaces time.Now as the clock timestamps are checked against.
func WithClock(now func() time.Time) Option { return func(v *Verifier) { v.now = now } }

// NewVerifier returns a verifier of webhooks signed with any of keys: an
// hmac endpoint's whsec_ secret or an ed25519 endpoint's whpk_ public key,
// as GET /v1/endpoints/{id}/secret answers them. Give both the secret and
// the previous_secret during the 24 hours after a rotation.
func NewVerifier(keys []string, opts ...Option) (*Verifier, error) {
	v := &Verifier{tolerance: DefaultTolerance, now: time.Now}
	for _, o := range opts {
		o(v)
	}
	for i, k := range keys {
		switch {
		case strings.HasPrefix(k, "whsec_"):
			wh, err := standardwebhooks.NewWebhook(k)
			if err != nil {
				return nil, fmt.Errorf("webhook: key %d: not a whsec_ secret", i)
			}
			v.hmac = append(v.hmac, wh)
		case strings.HasPrefix(k, "whpk_"):
			raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(k, "whpk_"))
			if err != nil || len(raw) != ed25519.PublicKeySize {
				return nil, fmt.Errorf("webhook: key %d: not a whpk_ Ed25519 public key", i)
			}
			v.ed25519 = append(v.ed25519, ed25519.PublicKey(raw))
		default:
			return nil, fmt.Errorf("webhook: key %d: neither a whsec_ secret nor a whpk_ public key", i)
		}
	}
	if len(keys) == 0 {
		return nil, errors.New("webhook: no key")
	}
	return v, nil
}

// Verify checks one webhook: its headers and its body, exactly as
// received. It returns nil when the timestamp is within the tolerance and
// a signature checks out with one of the keys.
func (v *Verifier) Verify(header http.Header, body []byte) error {
	id, ts, sigs := header.Get(HeaderID), header.Get(HeaderTimestamp), header.Get(HeaderSignature)
	if id == "" || ts == "" || sigs == "" {
		return ErrMissingHeaders
	}
	secs, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return ErrBadTimestamp
	}
	now := v.now()
	switch sent := time.Unix(secs, 0); {
	case now.Sub(sent) > v.tolerance:
		return ErrTooOld
	case sent.Sub(now) > v.tolerance:
		return ErrTooNew
	}
	for _, wh := range v.hmac {
		// The timestamp was checked above, against this verifier's clock.
		if wh.VerifyIgnoringTimestamp(body, header) == nil {
			return nil
		}
	}
	if len(v.ed25519) > 0 {
		signed := []byte(id + "." + ts + ".")
		signed = append(signed, body...)
		for _, sig := range strings.Fields(sigs) {
			encoded, ok := strings.CutPrefix(sig, "v1a,")
			if !ok {
				continue
			}
			raw, err := base64.StdEncoding.DecodeString(encoded)
			if err != nil || len(raw) != ed25519.SignatureSize {
				continue
			}
			for _, key := range v.ed25519 {
				if ed25519.Verify(key, signed, raw) {
					return nil
				}
			}
		}
	}
	return ErrNoMatchingSignature
}

// VerifyRequest reads r's body (up to MaxBodySize) and verifies it with
// r's headers, returning the body. r.Body is replaced by a reader of the
// same bytes.
func (v *Verifier) VerifyRequest(r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxBodySize+1))
	if err != nil {
		return nil, fmt.Errorf("webhook: read body: %w", err)
	}
	if len(body) > MaxBodySize {
		return nil, fmt.Errorf("webhook: body over %d bytes", MaxBodySize)
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	return body, v.Verify(r.Header, body)
}
