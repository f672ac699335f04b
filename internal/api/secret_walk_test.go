package api_test

import (
	"cmp"
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/api"
	"github.com/hookd/hookd/internal/store"
)

// secretPattern matches a secret or a credential in an answer: a signing
// secret (whsec_), an Ed25519 private key (whsk_), an API token (hkd_), a
// portal cookie token (hkp_) or a portal URL's one-time code.
var secretPattern = regexp.MustCompile(`whsec_[A-Za-z0-9+/=]{16,}|whsk_[A-Za-z0-9+/=]{16,}|hk[dp]_[A-Za-z0-9_-]{43}|#code=[A-Za-z0-9_-]{43}`)

// walkOrder runs reads first and deletions last, so one admin walk reaches
// every route with its fixtures still there.
func walkOrder(method string) int {
	switch method {
	case "GET", "HEAD", "OPTIONS":
		return 0
	case "DELETE":
		return 2
	}
	return 1
}

// TestEveryRouteRevealingASecretIsMarked walks every /v1 route as a
// writable admin, reads first: an answer holding a secret or credential
// comes from a route marked revealing in the route table, and every marked
// route's answer holds one. No route shows an Ed25519 endpoint's private
// key, and no route (marked revealing or not) shows a destination's
// credentials: they are write-only everywhere.
func TestEveryRouteRevealingASecretIsMarked(t *testing.T) {
	t.Parallel()
	in := setupIsolation(t)
	b := in.b
	r := b.do(t, "POST", "/v1/endpoints", map[string]any{"tenant_id": "initech", "url": "https://initech.example/ed", "signing": "ed25519"})
	requireStatus(t, http.StatusCreated, r)
	ed := decodeJSON[endpointJSON](t, r)
	r = b.do(t, "POST", "/v1/endpoints", map[string]any{"tenant_id": "initech", "type": "rabbitmq",
		"destination": map[string]any{"url": "amqp://mq.initech.example", "exchange": "hooks", "username": "u", "password": destPassword}})
	requireStatus(t, http.StatusCreated, r)
	dest := decodeJSON[endpointJSON](t, r)
	marked := api.RevealingRoutes()
	require.NotEmpty(t, marked)

	var routes []string
	require.NoError(t, chi.Walk(api.NewRouter(api.Deps{}), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		if strings.HasPrefix(route, "/v1/") {
			routes = append(routes, method+" "+route)
		}
		return nil
	}))
	slices.SortStableFunc(routes, func(x, y string) int {
		mx, _, _ := strings.Cut(x, " ")
		my, _, _ := strings.Cut(y, " ")
		return cmp.Compare(walkOrder(mx), walkOrder(my))
	})
	auth := "Bearer " + testToken
	revealed := map[string]bool{}
	for _, key := range routes {
		method, pattern, _ := strings.Cut(key, " ")
		path := in.pathFor(t, pattern, false)
		body := walkBodies[key]
		if bulk := bulkRoutes[key]; bulk != "" {
			body = map[string]any{bulk: []string{in.initechDelivery.ID}}
		}
		a := b.raw(t, method, path, auth, body)
		if secretPattern.Match(a.body) {
			revealed[key] = true
			require.True(t, marked[key], "%s answered a secret but is not marked revealing in routes.go: %s", key, a.body)
		}
		require.False(t, marked[key] && !revealed[key], "%s is marked revealing but answered %d without a secret: %s", key, a.status, a.body)
		require.NotContains(t, string(a.body), destPassword, "%s shows a destination credential", key)
		if safeMethod(method) && strings.HasPrefix(pattern, "/v1/endpoints/{id}") {
			edPath := strings.Replace(path, in.initechEndpoint.ID, ed.ID, 1)
			a := b.raw(t, method, edPath, auth, body)
			require.NotContains(t, string(a.body), "whsk_", "%s shows an Ed25519 private key", edPath)
			destPath := strings.Replace(path, in.initechEndpoint.ID, dest.ID, 1)
			a = b.raw(t, method, destPath, auth, body)
			require.NotContains(t, string(a.body), destPassword, "%s shows a destination credential", destPath)
		}
	}
	require.Equal(t, marked, revealed)
}

// TestSecretRoutesRefuseReadOnlyPrincipals: every route marked revealing
// answers 403 problem+json to a read-only tenant token, a read-only portal
// session and a read-only admin token, on the principal's own objects,
// while their writable counterparts are served; so a read-only principal
// never reads a signing secret.
func TestSecretRoutesRefuseReadOnlyPrincipals(t *testing.T) {
	t.Parallel()
	in := setupIsolation(t)
	b := in.b
	adminRO, _ := b.scopedToken(t, store.NewAPIToken{Scope: store.ScopeAdmin, Name: "grafana", ReadOnly: true})
	portalRO := b.portalClient(t, "globex", map[string]any{"read_only": true})
	portalRW := b.portalClient(t, "globex", map[string]any{})
	ownPath := func(pattern string) string {
		p := strings.ReplaceAll(pattern, "/v1/endpoints/{id}", "/v1/endpoints/"+in.globexEndpoint.ID)
		p = strings.ReplaceAll(p, "/v1/operational-endpoints/{id}", "/v1/operational-endpoints/"+in.opsEndpoint.ID)
		p = strings.ReplaceAll(p, "{tenant_id}", "globex")
		require.NotContains(t, p, "{", "%s: no fixture for a path parameter", pattern)
		return p
	}
	bodies := map[string]any{"POST /v1/tokens": map[string]any{"name": "mine", "tenant_id": "globex"}, "POST /v1/tenants/{tenant_id}/portal-sessions": map[string]any{}}

	marked := api.RevealingRoutes()
	require.Contains(t, marked, "GET /v1/endpoints/{id}/secret")
	require.Contains(t, marked, "GET /v1/operational-endpoints/{id}/secret")
	for key := range marked {
		method, pattern, _ := strings.Cut(key, " ")
		path, body := ownPath(pattern), bodies[key]
		refused := map[string]rawAnswer{
			"read-only tenant token": b.raw(t, method, path, "Bearer "+in.globexRO, body),
			"read-only admin token":  b.raw(t, method, path, "Bearer "+adminRO, body),
			"read-only portal":       portalRO.send(t, method, path, body),
		}
		for who, a := range refused {
			require.Equal(t, http.StatusForbidden, a.status, "%s, %s: %s", key, who, a.body)
			require.Equal(t, "application/problem+json", a.header.Get("Content-Type"), "%s, %s", key, who)
			require.NotRegexp(t, secretPattern, string(a.body))
		}
		var p api.Problem
		require.NoError(t, json.Unmarshal(refused["read-only admin token"].body, &p))
		require.Equal(t, "this token is read-only: it may not reveal a secret", p.Detail, key)

		// The writable admin is served, and so are the tenant's writable
		// principals on a route that is not admin-only.
		a := b.raw(t, method, path, "Bearer "+testToken, body)
		require.Contains(t, []int{http.StatusOK, http.StatusCreated}, a.status, "%s: %s", key, a.body)
		if pattern == "/v1/endpoints/{id}/secret" {
			require.Equal(t, http.StatusOK, b.raw(t, method, path, "Bearer "+in.globex, nil).status, key)
			require.Equal(t, http.StatusOK, portalRW.send(t, method, path, nil).status, key)
		}
	}
}
