package secretbox_test

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/secretbox"
)

func keyOf(b byte) []byte { return bytes.Repeat([]byte{b}, secretbox.KeyBytes) }

func ring(t *testing.T, primary []byte, previous ...[]byte) *secretbox.Keyring {
	t.Helper()
	k, err := secretbox.NewKeyring(primary, previous...)
	require.NoError(t, err)
	return k
}

func TestSealOpen(t *testing.T) {
	t.Parallel()
	a, b := ring(t, keyOf(1)), ring(t, keyOf(2))
	rotated := ring(t, keyOf(2), keyOf(1))
	var none *secretbox.Keyring

	sealedA, err := a.Seal("whsec_plain", "endpoint:ep_1:signing-secret")
	require.NoError(t, err)
	require.True(t, secretbox.IsSealed(sealedA))
	require.NotContains(t, sealedA, "whsec_plain")
	again, err := a.Seal("whsec_plain", "endpoint:ep_1:signing-secret")
	require.NoError(t, err)
	require.NotEqual(t, sealedA, again, "each seal has a fresh nonce")

	tests := []struct {
		name    string
		ring    *secretbox.Keyring
		stored  string
		context string
		want    string
		err     error
	}{
		{"same key and context", a, sealedA, "endpoint:ep_1:signing-secret", "whsec_plain", nil},
		{"previous key opens", rotated, sealedA, "endpoint:ep_1:signing-secret", "whsec_plain", nil},
		{"other key", b, sealedA, "endpoint:ep_1:signing-secret", "", secretbox.ErrUnknownKey},
		{"no keyring", none, sealedA, "endpoint:ep_1:signing-secret", "", secretbox.ErrNoKeyring},
		{"other context", a, sealedA, "endpoint:ep_2:signing-secret", "", secretbox.ErrOpen},
		{"plain value", a, "whsec_plain", "x", "whsec_plain", nil},
		{"plain value without keyring", none, "whsec_plain", "x", "whsec_plain", nil},
		{"truncated", a, sealedA[:len(sealedA)-4], "endpoint:ep_1:signing-secret", "", secretbox.ErrOpen},
		{"malformed", a, secretbox.Prefix + "zz.abc", "x", "", secretbox.ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := tt.ring.Open(tt.stored, tt.context)
			if tt.err != nil {
				require.ErrorIs(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestReseal(t *testing.T) {
	t.Parallel()
	old := ring(t, keyOf(1))
	rotated := ring(t, keyOf(2), keyOf(1))
	sealedOld, err := old.Seal("whsec_x", "c")
	require.NoError(t, err)

	out, changed, err := rotated.Reseal(sealedOld, "c")
	require.NoError(t, err)
	require.True(t, changed)
	require.True(t, rotated.Current(out))
	require.False(t, old.Current(out))
	pt, err := ring(t, keyOf(2)).Open(out, "c")
	require.NoError(t, err)
	require.Equal(t, "whsec_x", pt)

	same, changed, err := rotated.Reseal(out, "c")
	require.NoError(t, err)
	require.False(t, changed)
	require.Equal(t, out, same)

	fromPlain, changed, err := rotated.Reseal("whsec_y", "c")
	require.NoError(t, err)
	require.True(t, changed)
	require.True(t, secretbox.IsSealed(fromPlain))
}

func TestParseKey(t *testing.T) {
	t.Parallel()
	k := keyOf(7)
	tests := []struct {
		name, in string
		ok       bool
	}{
		{"std padded", base64.StdEncoding.EncodeToString(k), true},
		{"url raw", base64.RawURLEncoding.EncodeToString(k), true},
		{"trailing newline", base64.StdEncoding.EncodeToString(k) + "\n", true},
		{"short", base64.StdEncoding.EncodeToString(k[:16]), false},
		{"not base64", "not a key!", false},
		{"empty", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := secretbox.ParseKey(tt.in)
			if !tt.ok {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, k, got)
		})
	}
}

func TestKeyIDNamesTheKey(t *testing.T) {
	t.Parallel()
	require.Equal(t, secretbox.KeyID(keyOf(1)), ring(t, keyOf(1)).PrimaryID())
	require.NotEqual(t, secretbox.KeyID(keyOf(1)), secretbox.KeyID(keyOf(2)))
	require.Len(t, secretbox.KeyID(keyOf(1)), 12)
}

func TestParseEnvelope(t *testing.T) {
	t.Parallel()
	body := base64.RawURLEncoding.EncodeToString(make([]byte, 28))
	tests := []struct {
		name, in string
		ok       bool
	}{
		{"valid", secretbox.Prefix + "0123456789ab." + body, true},
		{"no prefix", "0123456789ab." + body, false},
		{"upper-case id", secretbox.Prefix + "0123456789AB." + body, false},
		{"short id", secretbox.Prefix + "0123." + body, false},
		{"no body", secretbox.Prefix + "0123456789ab", false},
		{"padded body", secretbox.Prefix + "0123456789ab." + body + "==", false},
		{"body with a line break", secretbox.Prefix + "0123456789ab." + body[:8] + "\r\n" + body[8:], false},
		{"too short", secretbox.Prefix + "0123456789ab." + base64.RawURLEncoding.EncodeToString(make([]byte, 27)), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e, err := secretbox.ParseEnvelope(tt.in)
			if !tt.ok {
				require.ErrorIs(t, err, secretbox.ErrMalformed)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.in, e.String())
		})
	}
}

// FuzzParseEnvelope checks that any stored value either parses into an
// envelope that formats back to itself, or is refused as malformed; and
// that opening it never panics.
func FuzzParseEnvelope(f *testing.F) {
	k, err := secretbox.NewKeyring(keyOf(3))
	require.NoError(f, err)
	sealed, err := k.Seal("whsec_seed", "c")
	require.NoError(f, err)
	for _, s := range []string{sealed, "whsec_plain", secretbox.Prefix, secretbox.Prefix + "0123456789ab.", "hks1..", strings.Repeat("A", 64)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		e, err := secretbox.ParseEnvelope(s)
		if err != nil {
			require.ErrorIs(t, err, secretbox.ErrMalformed)
		} else {
			require.Equal(t, s, e.String())
		}
		// Each fuzzing process seals the seed afresh (a random nonce), so
		// a value from another process's corpus may open too: what opens
		// must be a sealing of the seed's plaintext.
		if plain, err := k.Open(s, "c"); err == nil && secretbox.IsSealed(s) {
			require.Equal(t, "whsec_seed", plain, "only a sealing of the seed authenticates")
		}
	})
}
