package api

import (
	"fmt"

	"github.com/go-chi/chi/v5"
)

// NewRouter exposes newRouter to the external tests, which walk its routes.
var NewRouter = newRouter

// ScopeRules returns every /v1 route's scope rule, keyed "METHOD /v1/pattern",
// described in words.
func ScopeRules() map[string]string {
	rules := map[string]scopeRule{}
	addRoutes(chi.NewRouter(), Deps{}, rules)
	out := make(map[string]string, len(rules))
	for k, r := range rules {
		out[k] = fmt.Sprintf("%+v", r)
	}
	return out
}

// RevealingRoutes returns the /v1 routes marked as revealing a secret,
// keyed "METHOD /v1/pattern".
func RevealingRoutes() map[string]bool {
	rules := map[string]scopeRule{}
	addRoutes(chi.NewRouter(), Deps{}, rules)
	out := map[string]bool{}
	for k, r := range rules {
		if r.revealsSecret {
			out[k] = true
		}
	}
	return out
}

// ClientIP exposes clientIP to the external tests.
var ClientIP = clientIP
