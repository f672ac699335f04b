// Package secretbox owns the encryption of secrets at rest: AES-256-GCM
// under a keyring of one primary key (which seals) and previous keys
// (which still open), and the text envelope a sealed value is stored as,
// so the key that sealed a value is known from the value itself.
//
// An envelope is "hks1." + key id + "." + base64url(nonce || ciphertext);
// the key id is derived from the key, so operators name keys by nothing
// but their bytes. A caller binds each value to where it is stored with
// a context string (the AEAD's additional data, e.g.
// "endpoint:ep_x:signing-secret"): a sealed value copied to another row or
// field does not open there.
package secretbox

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// Prefix starts every sealed value. No plain value hookd stores (signing
// secrets start "whsec_") starts with it.
const Prefix = "hks1."

// KeyBytes is the length of a key: AES-256.
const KeyBytes = 32

// keyIDHexChars is the length of a key id: 48 bits of the key's SHA-256,
// enough to tell a handful of keys apart, far too few to say anything of
// a 256-bit key.
const keyIDHexChars = 12

var (
	// ErrMalformed is a value that starts like an envelope but is not one.
	ErrMalformed = errors.New("malformed sealed value")
	// ErrUnknownKey is an envelope sealed under a key the keyring lacks.
	ErrUnknownKey = errors.New("sealed under a key not in the keyring")
	// ErrNoKeyring is a sealed value met without any key configured.
	ErrNoKeyring = errors.New("sealed value but no secret key configured")
	// ErrOpen is an envelope whose key id is known but which does not
	// authenticate: altered, or moved from another context.
	ErrOpen = errors.New("sealed value does not authenticate under its key")
)

// Envelope is a parsed sealed value.
type Envelope struct {
	KeyID string
	// Sealed is the GCM nonce followed by the ciphertext and tag.
	Sealed []byte
}

// IsSealed reports whether v is stored as an envelope (it may still be
// malformed).
func IsSealed(v string) bool { return strings.HasPrefix(v, Prefix) }

// ParseEnvelope splits a sealed value into its key id and sealed bytes.
func ParseEnvelope(v string) (Envelope, error) {
	rest, ok := strings.CutPrefix(v, Prefix)
	if !ok {
		return Envelope{}, fmt.Errorf("%w: want prefix %q", ErrMalformed, Prefix)
	}
	id, body, ok := strings.Cut(rest, ".")
	if !ok || !validKeyID(id) {
		return Envelope{}, fmt.Errorf("%w: bad key id", ErrMalformed)
	}
	// Strict decoding still skips CR and LF; one stored form per envelope
	// wants them refused too.
	b, err := base64.RawURLEncoding.Strict().DecodeString(body)
	if err != nil || strings.ContainsAny(body, "\r\n") {
		return Envelope{}, fmt.Errorf("%w: body is not base64url", ErrMalformed)
	}
	if len(b) < nonceBytes+tagBytes {
		return Envelope{}, fmt.Errorf("%w: too short", ErrMalformed)
	}
	return Envelope{KeyID: id, Sealed: b}, nil
}

// String formats e as a stored value.
func (e Envelope) String() string {
	return Prefix + e.KeyID + "." + base64.RawURLEncoding.EncodeToString(e.Sealed)
}

const (
	nonceBytes = 12
	tagBytes   = 16
)

func validKeyID(id string) bool {
	if len(id) != keyIDHexChars {
		return false
	}
	for _, c := range id {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// KeyID returns the id of key as envelopes name it.
func KeyID(key []byte) string {
	sum := sha256.Sum256(append([]byte("hookd secretbox key id\x00"), key...))
	return hex.EncodeToString(sum[:])[:keyIDHexChars]
}

// ParseKey decodes a configured key: 32 bytes in standard or URL-safe
// base64, padded or not.
func ParseKey(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			if len(b) != KeyBytes {
				return nil, fmt.Errorf("must be %d bytes in base64, not %d", KeyBytes, len(b))
			}
			return b, nil
		}
	}
	return nil, fmt.Errorf("must be %d bytes in base64", KeyBytes)
}

type key struct {
	id   string
	aead cipher.AEAD
}

func newKey(b []byte) (key, error) {
	if len(b) != KeyBytes {
		return key{}, fmt.Errorf("secret key: want %d bytes, got %d", KeyBytes, len(b))
	}
	block, err := aes.NewCipher(b)
	if err != nil {
		return key{}, fmt.Errorf("secret key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return key{}, fmt.Errorf("secret key: %w", err)
	}
	return key{id: KeyID(b), aead: aead}, nil
}

// Keyring seals under its primary key and opens under any of its keys. A
// nil *Keyring is the configuration without a key: it stores values as
// they are and opens only plain ones.
type Keyring struct {
	primary key
	keys    map[string]key
}

// NewKeyring returns a keyring sealing under primary and also opening
// values sealed under previous.
func NewKeyring(primary []byte, previous ...[]byte) (*Keyring, error) {
	p, err := newKey(primary)
	if err != nil {
		return nil, err
	}
	k := &Keyring{primary: p, keys: map[string]key{p.id: p}}
	for _, b := range previous {
		pk, err := newKey(b)
		if err != nil {
			return nil, err
		}
		k.keys[pk.id] = pk
	}
	return k, nil
}

// PrimaryID returns the id of the key that seals; "" for a nil keyring.
func (k *Keyring) PrimaryID() string {
	if k == nil {
		return ""
	}
	return k.primary.id
}

// Has reports whether the keyring holds the key of id.
func (k *Keyring) Has(id string) bool {
	if k == nil {
		return false
	}
	_, ok := k.keys[id]
	return ok
}

// Seal returns plaintext sealed under the primary key for context; a nil
// keyring returns plaintext unchanged.
func (k *Keyring) Seal(plaintext, context string) (string, error) {
	if k == nil {
		return plaintext, nil
	}
	nonce := make([]byte, nonceBytes, nonceBytes+len(plaintext)+tagBytes)
	if _, err := rand.Read(nonce); err != nil {
		return "", fmt.Errorf("seal: %w", err)
	}
	sealed := k.primary.aead.Seal(nonce, nonce, []byte(plaintext), []byte(context))
	return Envelope{KeyID: k.primary.id, Sealed: sealed}.String(), nil
}

// Open returns the plaintext of a stored value: a sealed one opened for
// context, a plain one as it is.
func (k *Keyring) Open(stored, context string) (string, error) {
	if !IsSealed(stored) {
		return stored, nil
	}
	e, err := ParseEnvelope(stored)
	if err != nil {
		return "", err
	}
	if k == nil {
		return "", fmt.Errorf("%w (key id %s)", ErrNoKeyring, e.KeyID)
	}
	key, ok := k.keys[e.KeyID]
	if !ok {
		return "", fmt.Errorf("%w (key id %s)", ErrUnknownKey, e.KeyID)
	}
	pt, err := key.aead.Open(nil, e.Sealed[:nonceBytes], e.Sealed[nonceBytes:], []byte(context))
	if err != nil {
		return "", fmt.Errorf("%w (key id %s)", ErrOpen, e.KeyID)
	}
	return string(pt), nil
}

// Current reports whether stored needs no re-sealing: sealed under the
// primary key, or plain when there is no keyring.
func (k *Keyring) Current(stored string) bool {
	if k == nil {
		return !IsSealed(stored)
	}
	e, err := ParseEnvelope(stored)
	return err == nil && e.KeyID == k.primary.id
}

// Reseal returns stored sealed under the primary key for context (opening
// it first, or sealing it when plain), and whether it changed.
func (k *Keyring) Reseal(stored, context string) (string, bool, error) {
	if k.Current(stored) {
		return stored, false, nil
	}
	pt, err := k.Open(stored, context)
	if err != nil {
		return "", false, err
	}
	out, err := k.Seal(pt, context)
	return out, err == nil, err
}

// ParseKeyring builds the keyring of a configuration: primary (base64,
// empty for no keyring) and previous, comma-separated base64 keys that
// still open. Previous keys without a primary are an error.
func ParseKeyring(primary, previous string) (*Keyring, error) {
	var prev [][]byte
	for _, p := range strings.Split(previous, ",") {
		if strings.TrimSpace(p) == "" {
			continue
		}
		b, err := ParseKey(p)
		if err != nil {
			return nil, fmt.Errorf("previous key %d: %w", len(prev)+1, err)
		}
		prev = append(prev, b)
	}
	if strings.TrimSpace(primary) == "" {
		if len(prev) > 0 {
			return nil, errors.New("previous keys need a primary key")
		}
		return nil, nil
	}
	b, err := ParseKey(primary)
	if err != nil {
		return nil, err
	}
	return NewKeyring(b, prev...)
}
