package store_test

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/pgcluster"
	"github.com/hookd/hookd/internal/secretbox"
	"github.com/hookd/hookd/internal/store"
)

func keyring(t *testing.T, primary byte, previous ...byte) *secretbox.Keyring {
	t.Helper()
	var prev [][]byte
	for _, p := range previous {
		prev = append(prev, bytes.Repeat([]byte{p}, secretbox.KeyBytes))
	}
	k, err := secretbox.NewKeyring(bytes.Repeat([]byte{primary}, secretbox.KeyBytes), prev...)
	require.NoError(t, err)
	return k
}

// pgDump returns a plain-text dump of the test's database, taken with the
// private cluster's own pg_dump.
func pgDump(t *testing.T, url string) string {
	t.Helper()
	bin, err := pgcluster.BinDir()
	require.NoError(t, err)
	out, err := exec.Command(filepath.Join(bin, "pg_dump"), "--no-owner", "--dbname", url).Output()
	require.NoError(t, err, "pg_dump")
	return string(out)
}

func TestSecretsSealedAtRest(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	ctx := context.Background()
	s := store.New(b.db.Pool, nil, store.WithKeyring(keyring(t, 1)))

	e, err := s.CreateEndpoint(ctx, store.Endpoint{TenantID: "acme", URL: "https://example.com/hook", Secret: testSecret})
	require.NoError(t, err)
	require.Equal(t, testSecret, e.Secret, "callers see the plaintext")
	const rotated = "whsec_c2Vjb25kIHNlY3JldCBmb3IgdGhlIHRlc3Qh"
	e, err = s.RotateSecret(ctx, e.ID, rotated, time.Hour)
	require.NoError(t, err)
	require.Equal(t, rotated, e.Secret)
	require.Equal(t, testSecret, e.PreviousSecret)
	got, err := s.GetEndpoint(ctx, e.ID)
	require.NoError(t, err)
	require.Equal(t, rotated, got.Secret)
	require.Equal(t, testSecret, got.PreviousSecret)

	var stored, previous string
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT secret, previous_secret FROM endpoints WHERE id = $1`, e.ID).Scan(&stored, &previous))
	require.True(t, secretbox.IsSealed(stored))
	require.True(t, secretbox.IsSealed(previous))

	dump := pgDump(t, b.db.URL)
	require.Contains(t, dump, e.ID, "the dump holds the endpoint")
	for _, plain := range []string{testSecret, rotated, strings.TrimPrefix(testSecret, "whsec_"), strings.TrimPrefix(rotated, "whsec_")} {
		require.NotContains(t, dump, plain)
	}

	// A sealed value moved to another endpoint's row does not open there.
	other, err := s.CreateEndpoint(ctx, store.Endpoint{TenantID: "acme", URL: "https://example.com/other", Secret: testSecret})
	require.NoError(t, err)
	_, err = b.db.Pool.Exec(ctx, `UPDATE endpoints SET secret = $2 WHERE id = $1`, other.ID, stored)
	require.NoError(t, err)
	_, err = s.GetEndpoint(ctx, other.ID)
	require.ErrorIs(t, err, secretbox.ErrOpen)
}

func TestCheckSecrets(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	ctx := context.Background()
	plain := store.New(b.db.Pool, nil)
	_, err := plain.CreateEndpoint(ctx, store.Endpoint{TenantID: "acme", URL: "https://example.com/a", Secret: testSecret})
	require.NoError(t, err)
	rep, err := plain.CheckSecrets(ctx)
	require.NoError(t, err)
	require.Equal(t, store.SecretsReport{Plain: 1}, rep)

	a := store.New(b.db.Pool, nil, store.WithKeyring(keyring(t, 1)))
	_, err = a.CreateEndpoint(ctx, store.Endpoint{TenantID: "acme", URL: "https://example.com/b", Secret: testSecret})
	require.NoError(t, err)
	rep, err = a.CheckSecrets(ctx)
	require.NoError(t, err)
	require.Equal(t, store.SecretsReport{Plain: 1}, rep)

	tests := []struct {
		name string
		ring *secretbox.Keyring
		msg  string
		want store.SecretsReport
	}{
		{"no key", nil, "no --secret-key (SECRET_KEY) is set", store.SecretsReport{}},
		{"wrong key", keyring(t, 2), "no --secret-key-previous matches", store.SecretsReport{}},
		{"new key with the old as previous", keyring(t, 2, 1), "", store.SecretsReport{Plain: 1, Stale: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep, err := store.New(b.db.Pool, nil, store.WithKeyring(tt.ring)).CheckSecrets(ctx)
			if tt.msg != "" {
				require.ErrorIs(t, err, store.ErrSecretKey)
				require.ErrorContains(t, err, tt.msg)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, rep)
		})
	}
}

func TestResealSecrets(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	ctx := context.Background()
	plain := store.New(b.db.Pool, nil)
	old := store.New(b.db.Pool, nil, store.WithKeyring(keyring(t, 1)))
	var ids []string
	for i := range 7 {
		st := old
		if i%3 == 0 {
			st = plain
		}
		e, err := st.CreateEndpoint(ctx, store.Endpoint{TenantID: "acme", URL: "https://example.com/hook", Secret: testSecret})
		require.NoError(t, err)
		ids = append(ids, e.ID)
	}
	_, err := old.RotateSecret(ctx, ids[1], "whsec_c2Vjb25kIHNlY3JldCBmb3IgdGhlIHRlc3Qh", time.Hour)
	require.NoError(t, err)
	require.NoError(t, old.DeleteEndpoint(ctx, ids[2]))

	rotated := store.New(b.db.Pool, nil, store.WithKeyring(keyring(t, 2, 1)))
	var progress []int
	n, err := rotated.ResealSecrets(ctx, 3, func(done int) { progress = append(progress, done) })
	require.NoError(t, err)
	require.Equal(t, 7, n, "every endpoint, the deleted one included")
	require.Equal(t, []int{3, 6, 7}, progress)
	n, err = rotated.ResealSecrets(ctx, 3, nil)
	require.NoError(t, err)
	require.Zero(t, n, "a second run finds nothing to do")

	// Only the new key is needed now.
	only := store.New(b.db.Pool, nil, store.WithKeyring(keyring(t, 2)))
	rep, err := only.CheckSecrets(ctx)
	require.NoError(t, err)
	require.Equal(t, store.SecretsReport{}, rep)
	e, err := only.GetEndpoint(ctx, ids[1])
	require.NoError(t, err)
	require.Equal(t, testSecret, e.PreviousSecret)
	e, err = only.GetEndpoint(ctx, ids[0])
	require.NoError(t, err)
	require.Equal(t, testSecret, e.Secret)
}
