package api_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/api"
	"github.com/hookd/hookd/internal/store"
)

// rawAnswer is an answer to a request made without the OpenAPI checks of
// testBundle.do, for routes and statuses the document does not cover yet.
type rawAnswer struct {
	status int
	header http.Header
	body   []byte
}

// raw sends a request with the Authorization header auth ("" for none) and
// body as JSON (nil for none).
func (b *testBundle) raw(t *testing.T, method, path, auth string, body any) rawAnswer {
	t.Helper()
	var rd io.Reader = http.NoBody
	if body != nil {
		buf, err := json.Marshal(body)
		require.NoError(t, err)
		rd = bytes.NewReader(buf)
	}
	req, err := http.NewRequest(method, b.srv.URL+path, rd)
	require.NoError(t, err)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := b.srv.Client().Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	got, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return rawAnswer{status: res.StatusCode, header: res.Header, body: got}
}

// storedToken creates a stored admin token named name and returns it.
func (b *testBundle) storedToken(t *testing.T, name string) (string, store.APIToken) {
	t.Helper()
	return b.scopedToken(t, store.NewAPIToken{Scope: store.ScopeAdmin, Name: name})
}

// scopedToken stores the token in describes (its Sum is filled in) and
// returns it.
func (b *testBundle) scopedToken(t *testing.T, in store.NewAPIToken) (string, store.APIToken) {
	t.Helper()
	tok, sum, err := api.NewToken(rand.Reader)
	require.NoError(t, err)
	in.Sum = sum
	rec, err := b.store.CreateAPIToken(context.Background(), in)
	require.NoError(t, err)
	return tok, rec
}

func TestNewToken(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 100 {
		tok, sum, err := api.NewToken(rand.Reader)
		require.NoError(t, err)
		require.Regexp(t, `^hkd_[A-Za-z0-9_-]{43}$`, tok)
		require.Equal(t, sha256.Sum256([]byte(tok)), sum)
		require.False(t, seen[tok])
		seen[tok] = true
	}
	_, _, err := api.NewToken(bytes.NewReader(make([]byte, 31)))
	require.Error(t, err, "a short read is an error, never a weak token")
}

func TestValidateTokenName(t *testing.T) {
	t.Parallel()
	for _, good := range []string{"ci", "deploy-bot", "alice@acme.example", "svc.payments_2", "A", strings.Repeat("n", 64)} {
		require.NoError(t, api.ValidateTokenName(good), good)
	}
	for _, bad := range []string{"", "-x", ".x", "with space", "tab\t", "new\nline", "é", strings.Repeat("n", 65), "bootstrap", "Bootstrap", "a/b", "a:b"} {
		require.Error(t, api.ValidateTokenName(bad), "%q", bad)
	}
}

// TestStoredTokensAuthenticate: a live stored token and the bootstrap
// token are accepted on every scheme spelling the bootstrap token is.
func TestStoredTokensAuthenticate(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	tok, _ := b.storedToken(t, "ci")
	for _, h := range []string{"Bearer " + tok, "bearer " + tok, "Bearer  " + tok + " ", "Bearer " + testToken} {
		requireStatus(t, http.StatusOK, b.do(t, "GET", "/v1/endpoints", nil, withHeader("Authorization", h)))
	}
}

// TestUnauthorizedAnswersAreIdentical: a missing header, a garbled one, an
// unknown token, a well-formed token that was never issued and a revoked
// one all get the very same 401 body: nothing tells which part was wrong.
func TestUnauthorizedAnswersAreIdentical(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	revoked, rec := b.storedToken(t, "old")
	_, err := b.store.RevokeAPIToken(context.Background(), store.TokenRef{ID: rec.ID})
	require.NoError(t, err)
	live, _ := b.storedToken(t, "live")
	neverIssued, _, err := api.NewToken(rand.Reader)
	require.NoError(t, err)
	before := b.counts(t)

	cases := map[string]string{
		"missing":                  "",
		"garbled":                  "Bearer *%$#\t==",
		"tab for a space":          "Bearer\t" + live,
		"two tokens":               "Bearer " + live + " " + live,
		"non-ASCII":                "Bearer \xff\xfe\x80",
		"scheme only":              "Bearer",
		"basic":                    "Basic " + live,
		"unknown":                  "Bearer not-a-token",
		"never issued":             "Bearer " + neverIssued,
		"revoked":                  "Bearer " + revoked,
		"live token truncated":     "Bearer " + live[:len(live)-1],
		"live token with a suffix": "Bearer " + live + "A",
		"bootstrap with a suffix":  "Bearer " + testToken + "x",
	}
	var first []byte
	for name, h := range cases {
		for _, path := range []string{"/v1/endpoints", "/v1/breakers"} {
			a := b.raw(t, "GET", path, h, nil)
			require.Equal(t, http.StatusUnauthorized, a.status, "%s: %s", name, a.body)
			require.Equal(t, "application/problem+json", a.header.Get("Content-Type"))
			require.Equal(t, `Bearer realm="hookd"`, a.header.Get("WWW-Authenticate"))
			body := bytes.Replace(a.body, []byte(`"instance":"`+path+`"`), []byte(`"instance":""`), 1)
			if first == nil {
				first = body
			}
			require.Equal(t, string(first), string(body), "%s gives a different answer", name)
		}
	}
	var p api.Problem
	require.NoError(t, json.Unmarshal(first, &p))
	require.Equal(t, api.Problem{Type: api.ProblemTypeBase + "unauthorized", Title: "Unauthorized", Status: 401,
		Detail: "a valid bearer token is required"}, p)
	require.Equal(t, before, b.counts(t), "nothing written")
	var used int
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM api_tokens WHERE last_used_at IS NOT NULL`).Scan(&used))
	require.Zero(t, used, "a near miss is not a use")
}

// TestActorIsTheTokenName: breaker resets and isolations and endpoint
// enables are recorded with the name of the token that asked.
func TestActorIsTheTokenName(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	alice, _ := b.storedToken(t, "oncall-alice")
	e := b.createEndpoint(t, "acme")

	for _, step := range []struct{ token, action, actor string }{
		{alice, "isolate", "oncall-alice"},
		{testToken, "reset", "bootstrap"},
		{alice, "reset", "oncall-alice"},
	} {
		a := b.raw(t, "POST", "/v1/endpoints/"+e.ID+"/breaker/"+step.action, "Bearer "+step.token, map[string]any{"reason": "drill"})
		require.Equal(t, http.StatusOK, a.status, "%s", a.body)
		var detail struct {
			Transitions []struct {
				To    string `json:"to"`
				Actor string `json:"actor"`
				Note  string `json:"note"`
			} `json:"transitions"`
		}
		require.NoError(t, json.Unmarshal(a.body, &detail))
		require.NotEmpty(t, detail.Transitions)
		require.Equal(t, step.actor, detail.Transitions[0].Actor, step.action)
		require.Equal(t, "drill", detail.Transitions[0].Note)
	}
	var actors []string
	rows, err := b.db.Pool.Query(context.Background(), `SELECT actor FROM breaker_transitions WHERE endpoint_id = $1 ORDER BY id`, e.ID)
	require.NoError(t, err)
	for rows.Next() {
		var a string
		require.NoError(t, rows.Scan(&a))
		actors = append(actors, a)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"oncall-alice", "bootstrap", "oncall-alice"}, actors)

	requireStatus(t, http.StatusOK, b.do(t, "POST", "/v1/endpoints/"+e.ID+"/disable", nil, withHeader("Authorization", "Bearer "+alice)))
	requireStatus(t, http.StatusOK, b.do(t, "POST", "/v1/endpoints/"+e.ID+"/enable", nil, withHeader("Authorization", "Bearer "+alice)))
	var actor string
	require.NoError(t, b.db.Pool.QueryRow(context.Background(),
		`SELECT actor FROM endpoint_events WHERE endpoint_id = $1 AND kind = 'enabled'`, e.ID).Scan(&actor))
	require.Equal(t, "oncall-alice", actor)
}

// countingTokens counts the lookups that reach the real store.
type countingTokens struct {
	api.TokenStore
	n atomic.Int64
}

func (c *countingTokens) LookupAPIToken(ctx context.Context, sum [32]byte) (store.APIToken, []byte, error) {
	c.n.Add(1)
	return c.TokenStore.LookupAPIToken(ctx, sum)
}

// TestTokenAuthCachesAndSeesRevocationsWithinTheTTL: a verified token is
// trusted from memory for TokenCacheTTL (concurrent first uses share one
// lookup), so a revoke takes effect within that time and no later.
func TestTokenAuthCachesAndSeesRevocationsWithinTheTTL(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	tok, rec := b.storedToken(t, "ci")
	counting := &countingTokens{TokenStore: b.store}
	clock := &fakeClock{now: time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)}
	auth := api.NewTokenAuth("boot-token", counting, clock.Now)
	ctx := context.Background()

	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			p, err := auth.Check(ctx, tok)
			require.NoError(t, err)
			require.Equal(t, api.Principal{Name: "ci", TokenID: rec.ID, Scope: store.ScopeAdmin}, p)
		})
	}
	wg.Wait()
	require.LessOrEqual(t, counting.n.Load(), int64(20))
	lookups := counting.n.Load()
	for range 50 {
		p, err := auth.Check(ctx, tok)
		require.NoError(t, err)
		require.Equal(t, "ci", p.Name)
	}
	require.Equal(t, lookups, counting.n.Load(), "served from the cache")

	// The bootstrap token and malformed tokens never reach the store.
	p, err := auth.Check(ctx, "boot-token")
	require.NoError(t, err)
	require.Equal(t, api.Principal{Name: api.BootstrapTokenName, TokenID: api.BootstrapTokenName, Scope: store.ScopeAdmin}, p)
	name, ok := auth.Authenticate(ctx, tok)
	require.True(t, ok, "the dashboard login's check")
	require.Equal(t, "ci", name)
	for _, bad := range []string{"", "boot-token ", "boot-tokeN", "garbage", "hkd_short"} {
		_, err := auth.Check(ctx, bad)
		require.ErrorIs(t, err, api.ErrBadToken, "%q", bad)
	}
	require.Equal(t, lookups, counting.n.Load())

	_, err = b.store.RevokeAPIToken(ctx, store.TokenRef{ID: rec.ID})
	require.NoError(t, err)
	clock.Advance(api.TokenCacheTTL - time.Millisecond)
	p, err = auth.Check(ctx, tok)
	require.NoError(t, err, "still cached just before the TTL")
	require.Equal(t, "ci", p.Name)
	clock.Advance(time.Millisecond)
	_, err = auth.Check(ctx, tok)
	require.ErrorIs(t, err, api.ErrBadToken, "refused once the TTL has passed")
	require.Equal(t, lookups+1, counting.n.Load())
}

// TestTokenAuthWithoutBootstrap: with no API_TOKEN only stored tokens are
// accepted, and an empty presented token never matches the empty one.
func TestTokenAuthWithoutBootstrap(t *testing.T) {
	t.Parallel()
	_, b := setup(t, func(d *api.Deps) { d.Token = "" })
	tok, _ := b.storedToken(t, "ci")
	requireStatus(t, http.StatusOK, b.do(t, "GET", "/v1/endpoints", nil, withHeader("Authorization", "Bearer "+tok)))
	requireProblem(t, http.StatusUnauthorized, b.do(t, "GET", "/v1/endpoints", nil, withHeader("Authorization", "Bearer ")))
	auth := api.NewTokenAuth("", nil, nil)
	_, err := auth.Check(context.Background(), "")
	require.ErrorIs(t, err, api.ErrBadToken)
	_, err = auth.Check(context.Background(), tok)
	require.True(t, errors.Is(err, api.ErrBadToken), "no store, no stored tokens")
	_, ok := auth.Authenticate(context.Background(), tok)
	require.False(t, ok)
}
