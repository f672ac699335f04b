package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/api"
	"github.com/hookd/hookd/internal/config"
	"github.com/hookd/hookd/internal/store/storetest"
)

// serveReplica runs one api process (run, as main does) with env on the
// database and returns its base URL; it stops with the test.
func serveReplica(t *testing.T, env map[string]string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out, w := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := run(ctx, []string{"serve"}, func(k string) string { return env[k] }, strings.NewReader(""), w, io.Discard)
		_ = w.CloseWithError(errors.New("api stopped"))
		done <- err
	}()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "api listening on "); ok {
				addr <- a
			}
		}
		close(addr)
	}()
	a, ok := <-addr
	require.True(t, ok, "the api did not start")
	return a
}

// TestReplicasShareSessionsFromTheSecretKey: two api replicas given the
// same SECRET_KEY and no SESSION_KEY derive the same session and CSRF
// keys: a portal session opened on one makes changes on the other with its
// cookie and CSRF token, and a dashboard login on one is valid on the
// other, CSRF token included.
func TestReplicasShareSessionsFromTheSecretKey(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	env := map[string]string{
		"DATABASE_URL": db.URL, "API_TOKEN": "replica-test-token", "SECRET_KEY": base64.StdEncoding.EncodeToString(key),
		"REPLICAS": "2", "NO_MIGRATE": "true", "LISTEN_ADDR": "127.0.0.1:0", "METRICS_ADDR": "127.0.0.1:0",
		"ALLOW_PRIVATE_TARGETS": "true", "LOG_LEVEL": "warn",
	}
	a, b := serveReplica(t, env), serveReplica(t, env)
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	send := func(method, target, body string, header ...string) *http.Response {
		t.Helper()
		req, err := http.NewRequest(method, target, strings.NewReader(body))
		require.NoError(t, err)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		res, err := client.Do(req)
		require.NoError(t, err)
		t.Cleanup(func() { _ = res.Body.Close() })
		return res
	}
	decode := func(res *http.Response, v any) {
		t.Helper()
		require.NoError(t, json.NewDecoder(res.Body).Decode(v))
	}
	bearer := []string{"Authorization", "Bearer replica-test-token", "Content-Type", "application/json"}

	res := send("POST", a+"/v1/endpoints", `{"tenant_id":"acme","url":"https://acme.example/hook"}`, bearer...)
	require.Equal(t, http.StatusCreated, res.StatusCode)
	var ep struct {
		ID string `json:"id"`
	}
	decode(res, &ep)

	// A portal session opened and logged in on replica a.
	res = send("POST", a+"/v1/tenants/acme/portal-sessions", `{}`, bearer...)
	require.Equal(t, http.StatusCreated, res.StatusCode)
	var ps struct {
		URL string `json:"url"`
	}
	decode(res, &ps)
	_, code, _ := strings.Cut(ps.URL, "#code=")
	res = send("POST", a+"/portal/session", `{"code":"`+code+`"}`, "Content-Type", "application/json", "Origin", a)
	require.Equal(t, http.StatusOK, res.StatusCode)
	var info struct {
		CSRF string `json:"csrf"`
	}
	decode(res, &info)
	var portal string
	for _, c := range res.Cookies() {
		if c.Name == api.PortalCookie {
			portal = c.Name + "=" + c.Value
		}
	}
	require.NotEmpty(t, portal)

	// Its change, made on replica b.
	res = send("PATCH", b+"/v1/endpoints/"+ep.ID, `{"description":"from b"}`, "Cookie", portal, api.CSRFHeader, info.CSRF,
		"Content-Type", "application/json")
	body, _ := io.ReadAll(res.Body)
	require.Equal(t, http.StatusOK, res.StatusCode, "a portal change on another replica: %s", body)
	res = send("GET", b+"/portal/session", "", "Cookie", portal)
	require.Equal(t, http.StatusOK, res.StatusCode)
	var again struct {
		CSRF string `json:"csrf"`
	}
	decode(res, &again)
	require.Equal(t, info.CSRF, again.CSRF)

	// A dashboard login on a, used on b.
	res = send("POST", a+"/dashboard/login", url.Values{"token": {"replica-test-token"}}.Encode(), "Content-Type", "application/x-www-form-urlencoded")
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	var session string
	for _, c := range res.Cookies() {
		if c.Name == api.SessionCookie {
			session = c.Name + "=" + c.Value
		}
	}
	require.NotEmpty(t, session)
	res = send("GET", a+"/dashboard", "", "Cookie", session)
	require.Equal(t, http.StatusOK, res.StatusCode)
	page, _ := io.ReadAll(res.Body)
	m := regexp.MustCompile(`<meta name="hookd-csrf" content="([^"]+)">`).FindSubmatch(page)
	require.NotNil(t, m)
	res = send("POST", b+"/v1/endpoints/"+ep.ID+"/disable", "", "Cookie", session, api.CSRFHeader, string(m[1]))
	body, _ = io.ReadAll(res.Body)
	require.Equal(t, http.StatusOK, res.StatusCode, "a dashboard change on another replica: %s", body)
}

// TestReplicasNeedASharedSessionSecret: with more than one replica and
// neither SESSION_KEY nor SECRET_KEY, the api refuses to start, naming the
// settings; with either, or with one replica, it gets past the check.
func TestReplicasNeedASharedSessionSecret(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	key := base64.StdEncoding.EncodeToString(make([]byte, 32))
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"REPLICAS": "2"}, "--replicas (REPLICAS): is 2, which needs --session-key (SESSION_KEY) or --secret-key (SECRET_KEY): " +
			"each replica would otherwise draw keys of its own, and a dashboard session or portal change made on one would fail on the others"},
		{map[string]string{"REPLICAS": "0"}, "--replicas (REPLICAS): must be at least 1"},
		{map[string]string{"REPLICAS": "2", "SECRET_KEY": key}, ""},
		{map[string]string{"REPLICAS": "2", "SESSION_KEY": strings.Repeat("k", 32)}, ""},
		{map[string]string{}, ""},
	} {
		tc.env["API_TOKEN"] = "t"
		tc.env["DATABASE_URL"] = "postgres://postgres@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=2"
		err := run(ctx, nil, func(k string) string { return tc.env[k] }, strings.NewReader(""), io.Discard, io.Discard)
		var ue *config.UsageError
		if tc.want == "" {
			require.Error(t, err, "the cancelled context stops it at the database")
			require.False(t, errors.As(err, &ue), "%v: %v", tc.env, err)
			continue
		}
		require.ErrorAs(t, err, &ue, "%v", tc.env)
		require.Equal(t, tc.want, err.Error())
	}
}
