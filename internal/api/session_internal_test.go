package api

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSessionKeysAreDerived: the session cookie key and the CSRF key are
// derived from the configured secret under distinct labels: the same
// secret gives the same keys on every replica, the two keys differ from
// each other and from the secret (which may be SECRET_KEY, the sealing
// key), and another secret gives other keys.
func TestSessionKeysAreDerived(t *testing.T) {
	t.Parallel()
	secret := bytes.Repeat([]byte{7}, 32)
	a, b := newSessions(secret, time.Now), newSessions(bytes.Clone(secret), time.Now)
	require.Equal(t, a.sessionKey, b.sessionKey)
	require.Equal(t, a.csrfKey, b.csrfKey)
	require.Len(t, a.sessionKey, 32)
	require.NotEqual(t, a.sessionKey, a.csrfKey)
	require.NotEqual(t, secret, a.sessionKey)
	require.NotEqual(t, secret, a.csrfKey)
	other := newSessions(bytes.Repeat([]byte{8}, 32), time.Now)
	require.NotEqual(t, a.sessionKey, other.sessionKey)
	require.NotEqual(t, a.csrfKey, other.csrfKey)
	random1, random2 := newSessions(nil, time.Now), newSessions(nil, time.Now)
	require.NotEqual(t, random1.sessionKey, random2.sessionKey, "without a secret, a key of the process's own")

	value, sess, err := a.issue("ops", "tok_1")
	require.NoError(t, err)
	got, ok := b.parse(value)
	require.True(t, ok, "another replica with the secret verifies the cookie")
	require.Equal(t, sess, got)
	require.True(t, b.validCSRF(sess, a.csrfToken(sess)))
	_, ok = other.parse(value)
	require.False(t, ok)
	require.False(t, other.validCSRF(sess, a.csrfToken(sess)))
}
