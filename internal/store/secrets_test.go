package store_test

import (
	"bytes"
	"context"
	"fmt"
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

	const apiKey, route, replaced = "rcv-credential-5f2c91aa", "route-eu-west-83d1", "rcv-credential-replaced-0be7"
	e, err := s.CreateEndpoint(ctx, store.Endpoint{TenantID: "acme", URL: "https://example.com/hook", Secret: testSecret,
		Headers: map[string]string{"X-Api-Key": apiKey, "X-Route": route}})
	require.NoError(t, err)
	require.Equal(t, testSecret, e.Secret, "callers see the plaintext")
	require.Equal(t, map[string]string{"X-Api-Key": apiKey, "X-Route": route}, e.Headers, "callers see the plaintext")
	const rotated = "whsec_c2Vjb25kIHNlY3JldCBmb3IgdGhlIHRlc3Qh"
	e, err = s.RotateSecret(ctx, e.ID, rotated, time.Hour)
	require.NoError(t, err)
	require.Equal(t, rotated, e.Secret)
	require.Equal(t, testSecret, e.PreviousSecret)
	got, err := s.GetEndpoint(ctx, e.ID)
	require.NoError(t, err)
	require.Equal(t, rotated, got.Secret)
	require.Equal(t, testSecret, got.PreviousSecret)
	require.Equal(t, route, got.Headers["X-Route"])

	// Replacing the headers seals the new values; a PATCH of other fields
	// keeps the sealed ones as they are.
	replacedHeaders := map[string]string{"X-Api-Key": replaced, "X-Route": route}
	e, err = s.UpdateEndpoint(ctx, e.ID, store.EndpointPatch{Headers: &replacedHeaders})
	require.NoError(t, err)
	require.Equal(t, replacedHeaders, e.Headers)
	desc := "kept headers"
	e, err = s.UpdateEndpoint(ctx, e.ID, store.EndpointPatch{Description: &desc})
	require.NoError(t, err)
	require.Equal(t, replacedHeaders, e.Headers)
	// Every read path opens them: the dispatchers' cache loads with
	// GetEndpoints, the API lists and gets.
	byID, err := s.GetEndpoints(ctx, []string{e.ID})
	require.NoError(t, err)
	require.Equal(t, replacedHeaders, byID[e.ID].Headers)
	list, err := s.ListEndpoints(ctx, store.OneTenant("acme"), store.Page{Limit: 10})
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, replacedHeaders, list[0].Headers)

	var stored, previous string
	var storedHeaders map[string]string
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT secret, previous_secret, headers FROM endpoints WHERE id = $1`, e.ID).Scan(&stored, &previous, &storedHeaders))
	require.True(t, secretbox.IsSealed(stored))
	require.True(t, secretbox.IsSealed(previous))
	require.Len(t, storedHeaders, 2, "names stay readable")
	for name, v := range storedHeaders {
		require.True(t, secretbox.IsSealed(v), "header %s", name)
	}

	dump := pgDump(t, b.db.URL)
	require.Contains(t, dump, e.ID, "the dump holds the endpoint")
	require.Contains(t, dump, "X-Api-Key", "the dump holds the header names")
	for _, plain := range []string{testSecret, rotated, strings.TrimPrefix(testSecret, "whsec_"), strings.TrimPrefix(rotated, "whsec_"), apiKey, route, replaced} {
		require.NotContains(t, dump, plain)
	}

	// A sealed value moved to another endpoint's row does not open there.
	other, err := s.CreateEndpoint(ctx, store.Endpoint{TenantID: "acme", URL: "https://example.com/other", Secret: testSecret})
	require.NoError(t, err)
	_, err = b.db.Pool.Exec(ctx, `UPDATE endpoints SET secret = $2 WHERE id = $1`, other.ID, stored)
	require.NoError(t, err)
	_, err = s.GetEndpoint(ctx, other.ID)
	require.ErrorIs(t, err, secretbox.ErrOpen)

	// A sealed header value opens neither under another name nor on
	// another endpoint, and its error names the header, never the value.
	third, err := s.CreateEndpoint(ctx, store.Endpoint{TenantID: "acme", URL: "https://example.com/third", Secret: testSecret})
	require.NoError(t, err)
	for _, tc := range []struct {
		name, id string
		headers  map[string]string
	}{
		{"another name", e.ID, map[string]string{"X-Route": storedHeaders["X-Api-Key"]}},
		{"another endpoint", third.ID, map[string]string{"X-Api-Key": storedHeaders["X-Api-Key"]}},
	} {
		_, err = b.db.Pool.Exec(ctx, `UPDATE endpoints SET headers = $2 WHERE id = $1`, tc.id, tc.headers)
		require.NoError(t, err)
		_, err = s.GetEndpoint(ctx, tc.id)
		require.ErrorIs(t, err, secretbox.ErrOpen, tc.name)
		require.ErrorContains(t, err, "open header X-", tc.name)
		require.NotContains(t, err.Error(), replaced, tc.name)
	}
}

// TestHeaderValuesPlainWithoutKey: without a keyring header values are
// stored as given, and a keyed store still reads them (rotate-key seals
// them later).
func TestHeaderValuesPlainWithoutKey(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	ctx := context.Background()
	plain := store.New(b.db.Pool, nil)
	headers := map[string]string{"X-Api-Key": "rcv-plain-credential"}
	e, err := plain.CreateEndpoint(ctx, store.Endpoint{TenantID: "acme", URL: "https://example.com/hook", Secret: testSecret, Headers: headers})
	require.NoError(t, err)
	var stored map[string]string
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT headers FROM endpoints WHERE id = $1`, e.ID).Scan(&stored))
	require.Equal(t, headers, stored)
	got, err := store.New(b.db.Pool, nil, store.WithKeyring(keyring(t, 1))).GetEndpoint(ctx, e.ID)
	require.NoError(t, err)
	require.Equal(t, headers, got.Headers)
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

	checkSecretsCases(t, b, []checkSecretsCase{
		{"no key", nil, "no --secret-key (SECRET_KEY) is set", store.SecretsReport{}},
		{"wrong key", keyring(t, 2), "no --secret-key-previous matches", store.SecretsReport{}},
		{"new key with the old as previous", keyring(t, 2, 1), "", store.SecretsReport{Plain: 1, Stale: 1}},
	})
}

// TestCheckSecretsOpensHeaderValues: header values are checked like
// secrets, even on an endpoint whose secret is still plain: a wrong or
// missing key fails, previous-key and plain values are counted.
func TestCheckSecretsOpensHeaderValues(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	ctx := context.Background()
	plain := store.New(b.db.Pool, nil)
	e, err := plain.CreateEndpoint(ctx, store.Endpoint{TenantID: "acme", URL: "https://example.com/a", Secret: testSecret,
		Headers: map[string]string{"X-Plain": "p"}})
	require.NoError(t, err)
	rep, err := plain.CheckSecrets(ctx)
	require.NoError(t, err)
	require.Equal(t, store.SecretsReport{Plain: 2}, rep, "the secret and the header value")

	// Sealed under key 1: the headers only, the secret stays plain.
	headers := map[string]string{"X-Api-Key": "k", "X-Route": "r"}
	_, err = store.New(b.db.Pool, nil, store.WithKeyring(keyring(t, 1))).UpdateEndpoint(ctx, e.ID, store.EndpointPatch{Headers: &headers})
	require.NoError(t, err)

	checkSecretsCases(t, b, []checkSecretsCase{
		{"no key", nil, "2 secrets are sealed under key id " + keyring(t, 1).PrimaryID() + " and no --secret-key (SECRET_KEY) is set", store.SecretsReport{}},
		{"wrong key", keyring(t, 2), "no --secret-key-previous matches", store.SecretsReport{}},
		{"the key", keyring(t, 1), "", store.SecretsReport{Plain: 1}},
		{"new key with the old as previous", keyring(t, 2, 1), "", store.SecretsReport{Plain: 1, Stale: 2}},
	})

	// A header value that does not open under the right key (moved to
	// another name) fails the check too.
	var stored map[string]string
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT headers FROM endpoints WHERE id = $1`, e.ID).Scan(&stored))
	_, err = b.db.Pool.Exec(ctx, `UPDATE endpoints SET headers = $2 WHERE id = $1`, e.ID, map[string]string{"X-Api-Key": stored["X-Route"]})
	require.NoError(t, err)
	_, err = store.New(b.db.Pool, nil, store.WithKeyring(keyring(t, 1))).CheckSecrets(ctx)
	require.ErrorIs(t, err, store.ErrSecretKey)
	require.ErrorContains(t, err, "does not open")
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
		var headers map[string]string
		if i%2 == 0 {
			headers = map[string]string{"X-Api-Key": fmt.Sprintf("key-%d", i), "X-Route": "eu"}
		}
		e, err := st.CreateEndpoint(ctx, store.Endpoint{TenantID: "acme", URL: "https://example.com/hook", Secret: testSecret, Headers: headers})
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
	require.Equal(t, map[string]string{"X-Api-Key": "key-0", "X-Route": "eu"}, e.Headers, "sealed from plain text")
	e, err = only.GetEndpoint(ctx, ids[4])
	require.NoError(t, err)
	require.Equal(t, map[string]string{"X-Api-Key": "key-4", "X-Route": "eu"}, e.Headers, "resealed from the previous key")
	var stale int
	require.NoError(t, b.db.Pool.QueryRow(ctx, `
		SELECT count(*) FROM endpoints e, jsonb_each_text(e.headers) h WHERE h.value NOT LIKE $1`,
		secretbox.Prefix+keyring(t, 2).PrimaryID()+".%").Scan(&stale))
	require.Zero(t, stale, "every header value sealed under the new key")
}

// TestResealSecretsKeepsHeadersReplacedMeanwhile: a row whose headers
// changed after resealBatch read them is not overwritten with the values
// it read; the next run reseals what the update wrote.
func TestResealSecretsKeepsHeadersReplacedMeanwhile(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	ctx := context.Background()
	old := store.New(b.db.Pool, nil, store.WithKeyring(keyring(t, 1)))
	e, err := old.CreateEndpoint(ctx, store.Endpoint{TenantID: "acme", URL: "https://example.com/hook", Secret: testSecret,
		Headers: map[string]string{"X-Api-Key": "before"}})
	require.NoError(t, err)
	rotated := store.New(b.db.Pool, nil, store.WithKeyring(keyring(t, 2, 1)))
	after := map[string]string{"X-Api-Key": "after"}
	n, err := store.ResealAfterRead(ctx, rotated, func() {
		_, err := old.UpdateEndpoint(ctx, e.ID, store.EndpointPatch{Headers: &after})
		require.NoError(t, err)
	})
	require.NoError(t, err)
	require.Zero(t, n, "the changed row is left as the update wrote it")
	got, err := rotated.GetEndpoint(ctx, e.ID)
	require.NoError(t, err)
	require.Equal(t, after, got.Headers)
	n, err = rotated.ResealSecrets(ctx, 10, nil)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	got, err = store.New(b.db.Pool, nil, store.WithKeyring(keyring(t, 2))).GetEndpoint(ctx, e.ID)
	require.NoError(t, err)
	require.Equal(t, after, got.Headers)
}

// checkSecretsCase is CheckSecrets under one keyring: the error it names
// (msg), or the report it gives.
type checkSecretsCase struct {
	name string
	ring *secretbox.Keyring
	msg  string
	want store.SecretsReport
}

func checkSecretsCases(t *testing.T, b *testBundle, tests []checkSecretsCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep, err := store.New(b.db.Pool, nil, store.WithKeyring(tt.ring)).CheckSecrets(context.Background())
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
