package api_test

import (
	"encoding/base64"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/api"
)

// v1Calls returns one well-formed call of every documented /v1 operation,
// on ids that name nothing.
func v1Calls(t *testing.T, b *testBundle) []struct{ method, path string } {
	t.Helper()
	var out []struct{ method, path string }
	for key := range operations(b.doc) {
		method, path, _ := strings.Cut(key, " ")
		if !strings.HasPrefix(path, "/v1/") {
			continue
		}
		for prefix, kind := range map[string]string{"/v1/endpoints/": "ep", "/v1/operational-endpoints/": "ep", "/v1/messages/": "msg", "/v1/deliveries/": "dlv", "/v1/tokens/": "tok", "/v1/portal-sessions/": "ps"} {
			if strings.HasPrefix(path, prefix) {
				path = strings.Replace(path, "{id}", missingID(kind), 1)
			}
		}
		path = strings.Replace(path, "{name}", "nope", 1)
		path = strings.Replace(path, "{tenant_id}", "nope", 1)
		require.NotContains(t, path, "{")
		out = append(out, struct{ method, path string }{method, path})
	}
	require.Len(t, out, 56)
	return out
}

// bodyFor returns a valid body for a call that takes one.
func bodyFor(method, path string) any {
	switch {
	case method == "POST" && path == "/v1/endpoints":
		return map[string]any{"tenant_id": "acme", "url": "https://acme.example/hook"}
	case method == "POST" && path == "/v1/operational-endpoints":
		return map[string]any{"url": "https://ops.example/hook"}
	case method == "POST" && path == "/v1/messages":
		return map[string]any{"tenant_id": "acme", "event_type": "a", "payload": 1}
	case method == "PATCH":
		return map[string]any{"description": "x"}
	case method == "POST" && path == "/v1/tokens":
		return map[string]any{"name": "nope"}
	case method == "POST" && path == "/v1/traffic-classes", method == "PUT":
		return map[string]any{"name": "nope"}
	case method == "POST" && strings.HasSuffix(path, "/breaker/reset"), strings.HasSuffix(path, "/breaker/isolate"):
		return map[string]any{"reason": "x"}
	case method == "POST" && strings.HasSuffix(path, "/recover"):
		return map[string]any{"since": time.Now().Add(-time.Hour).Format(time.RFC3339)}
	}
	return nil
}

func TestAuthRejectsEveryBadToken(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	b.createEndpoint(t, "acme")
	before := b.counts(t)
	basic := base64.StdEncoding.EncodeToString([]byte("admin:" + testToken))
	variants := map[string][]string{
		"missing":               nil,
		"empty":                 {""},
		"scheme only":           {"Bearer"},
		"scheme and a space":    {"Bearer "},
		"wrong token":           {"Bearer not-the-token"},
		"token with a suffix":   {"Bearer " + testToken + "x"},
		"truncated token":       {"Bearer " + testToken[:len(testToken)-1]},
		"token and more words":  {"Bearer " + testToken + " please"},
		"basic":                 {"Basic " + basic},
		"another scheme":        {"Token " + testToken},
		"no scheme":             {testToken},
		"garbled":               {"Bearer \xff\xfe\x80" + testToken},
		"token in the scheme":   {testToken + " " + testToken},
		"wrong one comes first": {"Bearer wrong", "Bearer " + testToken},
	}
	var first *api.Problem
	for name, headers := range variants {
		t.Run(name, func(t *testing.T) {
			for _, c := range v1Calls(t, b) {
				opts := []callOpt{withoutAuth()}
				for _, h := range headers {
					opts = append(opts, withHeader("Authorization", h))
				}
				r := b.do(t, c.method, c.path, bodyFor(c.method, c.path), opts...)
				p := requireProblem(t, http.StatusUnauthorized, r)
				require.Equal(t, `Bearer realm="hookd"`, r.Header.Get("WWW-Authenticate"))
				require.Equal(t, c.path, p.Instance)
				// The same answer whatever was wrong: no hint.
				p.Instance = ""
				if first == nil {
					first = &p
				}
				require.Equal(t, *first, p)
				require.Empty(t, p.Errors)
			}
		})
	}
	require.Equal(t, api.Problem{Type: api.ProblemTypeBase + "unauthorized", Title: "Unauthorized", Status: 401,
		Detail: "a valid bearer token is required"}, *first)
	require.Equal(t, before, b.counts(t), "nothing written without a token")
}

func TestAuthAcceptsTheToken(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	for _, h := range []string{"Bearer " + testToken, "bearer " + testToken, "BEARER " + testToken, "Bearer   " + testToken + " "} {
		r := b.do(t, "GET", "/v1/endpoints", nil, withHeader("Authorization", h))
		requireStatus(t, http.StatusOK, r)
	}
}

func TestAuthWithoutAConfiguredTokenAdmitsNobody(t *testing.T) {
	t.Parallel()
	_, b := setup(t, func(d *api.Deps) { d.Token = "" })
	for _, h := range []string{"Bearer " + testToken, "Bearer ", "Bearer x"} {
		requireProblem(t, http.StatusUnauthorized, b.do(t, "GET", "/v1/endpoints", nil, withHeader("Authorization", h)))
	}
}

func TestHealthRoutesNeedNoToken(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	for _, path := range []string{"/healthz", "/readyz", "/openapi.json"} {
		for _, h := range []string{"", "Bearer wrong", "Basic x"} {
			opts := []callOpt{withoutAuth()}
			if h != "" {
				opts = append(opts, withHeader("Authorization", h))
			}
			requireStatus(t, http.StatusOK, b.do(t, "GET", path, nil, opts...))
		}
	}
}
