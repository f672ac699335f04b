package api

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/store"
)

// TestScopeIsExplicit: only a principal of scope admin without a tenant
// reaches every tenant; one of no scope, or of scope tenant without its
// tenant, reaches nothing (an empty tenant id once meant an admin), and its
// lists read no tenant's rows.
func TestScopeIsExplicit(t *testing.T) {
	t.Parallel()
	d := Deps{Logger: slog.New(slog.DiscardHandler)}
	rules := []scopeRule{anyToken, tenantQuery, tenantBody, tenantItems, adminOnly}
	for _, c := range []struct {
		name    string
		p       Principal
		reaches bool
		tenants store.Tenants
	}{
		{"admin", Principal{Name: "ops", Scope: store.ScopeAdmin}, true, store.AllTenants()},
		{"tenant", Principal{Name: "acme", Scope: store.ScopeTenant, TenantID: "acme"}, true, store.OneTenant("acme")},
		{"tenant without its tenant", Principal{Name: "x", Scope: store.ScopeTenant}, false, store.Tenants{}},
		{"no scope", Principal{Name: "x"}, false, store.Tenants{}},
		{"no scope, with a tenant", Principal{Name: "x", TenantID: "acme"}, false, store.Tenants{}},
		{"admin with a tenant", Principal{Name: "x", Scope: store.ScopeAdmin, TenantID: "acme"}, false, store.Tenants{}},
	} {
		r := withPrincipal(httptest.NewRequest("GET", "/v1/endpoints", nil), c.p)
		for _, rule := range rules {
			err := checkScope(r, d, rule, c.p)
			switch {
			case !c.reaches:
				require.ErrorIs(t, err, errNoScope, "%s: %+v", c.name, rule)
				require.Equal(t, http.StatusForbidden, problemOf(err).Status)
			case rule.adminOnly && !c.p.Admin():
				require.ErrorIs(t, err, errAdminOnly, c.name)
			default:
				require.NoError(t, err, "%s: %+v", c.name, rule)
			}
		}
		require.Equal(t, c.tenants, requestTenants(r), c.name)
		require.Equal(t, c.reaches, allowTenant(r, "tenant_id", "acme") == nil, c.name)
	}
}
