package api

import (
	"context"
	"errors"
	"log/slog"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/hookd/hookd/internal/store"
	"github.com/hookd/hookd/internal/trafficclass"
)

// Principal is who a /v1 request acts as: the token it authenticated with
// (or the dashboard session's token, or a portal session).
type Principal struct {
	// Name is the token's name, what audit records name as the actor.
	Name string
	// TokenID is the token's id: a stored token's, "bootstrap" for
	// API_TOKEN, empty for a portal session or a token of an
	// Authenticator that has no ids.
	TokenID string
	// Scope is store.ScopeAdmin (every tenant, and the operational
	// routes) or store.ScopeTenant (TenantID's objects alone). A principal
	// of any other scope, or a tenant principal without a tenant, reaches
	// nothing.
	Scope string
	// TenantID is the tenant a tenant principal is bound to; empty for an
	// admin.
	TenantID string
	// ReadOnly principals may make no change.
	ReadOnly bool
}

// Admin reports whether p reaches every tenant and the operational routes.
func (p Principal) Admin() bool { return p.Scope == store.ScopeAdmin && p.TenantID == "" }

// tenantBound reports whether p is a tenant principal with its tenant.
func (p Principal) tenantBound() bool { return p.Scope == store.ScopeTenant && p.TenantID != "" }

// adminPrincipal is an admin named name, of the token tokenID: the
// bootstrap token, a dashboard session's token, and any token of an
// Authenticator that knows no scopes.
func adminPrincipal(name, tokenID string) Principal {
	return Principal{Name: name, TokenID: tokenID, Scope: store.ScopeAdmin}
}

func principalOf(t store.APIToken) Principal {
	return Principal{Name: t.Name, TokenID: t.ID, Scope: t.Scope, TenantID: t.TenantID, ReadOnly: t.ReadOnly}
}

type principalKey struct{}

func withPrincipal(r *http.Request, p Principal) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), principalKey{}, p))
}

// principalFrom returns the request's principal; a request that was not
// authenticated has none.
func principalFrom(r *http.Request) (Principal, bool) {
	p, ok := r.Context().Value(principalKey{}).(Principal)
	return p, ok
}

// Refusals of an authenticated request. None depends on whether an
// object exists: another tenant's object answers 404, as a missing one.
var (
	// errNoScope is a principal neither an admin nor bound to a tenant,
	// which no authenticator should make: it reaches nothing.
	errNoScope   = errors.New("this token has no scope")
	errAdminOnly = errors.New("this route needs an admin token")
	errReadOnly  = errors.New("this token is read-only: it may make no change")
	// errReadOnlySecret is a read-only principal on a route that reveals
	// a secret: a signing secret lets its holder forge webhooks, a token
	// or a portal code act as their principal.
	errReadOnlySecret = errors.New("this token is read-only: it may not reveal a secret")
	errOtherTenant    = errors.New("this token may only name its own tenant")
	// errClassNotSelectable is a tenant principal naming a traffic class
	// an admin did not make tenant_selectable (or none at all: the answer
	// is the same, so it tells no class exists).
	errClassNotSelectable = errors.New("this token may only pick a traffic class an admin made tenant_selectable")
	// errDashboardAdmin is a dashboard login with a tenant or read-only
	// token.
	errDashboardAdmin = errors.New("the dashboard needs a writable admin token")
)

// otherTenantError is a body or query field naming another tenant than a
// tenant token's.
type otherTenantError struct{ field string }

func (e *otherTenantError) Error() string        { return errOtherTenant.Error() }
func (e *otherTenantError) Is(target error) bool { return target == errOtherTenant }

// classNotSelectableError is a traffic_class a tenant principal may not
// pick.
type classNotSelectableError struct{ field string }

func (e *classNotSelectableError) Error() string        { return errClassNotSelectable.Error() }
func (e *classNotSelectableError) Is(target error) bool { return target == errClassNotSelectable }

// scopeRule is what a /v1 route lets a tenant token do. Every /v1 route is
// registered with one (routes.go), and authorize enforces it; a method
// other than GET, HEAD or OPTIONS is a change, refused to read-only
// tokens whatever the rule, and so is a route that reveals a secret.
type scopeRule struct {
	// revealsSecret routes answer a secret or a credential: an endpoint's
	// signing secret, a token, a portal session's one-time code. Revealing
	// one is a privileged read, refused to every read-only principal.
	revealsSecret bool
	// adminOnly routes answer 403 to every tenant token.
	adminOnly bool
	// owner is the store owner kind of the {id} in the path: a tenant
	// token reaches only its own tenant's, another's answers 404.
	owner string
	// tenantQuery lists take tenant_id from the query: a tenant token's
	// list is filtered to its tenant, and naming another is refused.
	tenantQuery bool
	// tenantBody bodies name a tenant_id, which the handler passes to
	// allowTenant before doing anything.
	tenantBody bool
	// tenantItems bodies name objects by id (a bulk operation): the
	// handler passes the principal's tenant to the store, which answers
	// each object of another tenant as not found, item by item.
	tenantItems bool
}

var (
	// anyToken routes read global data every token may see.
	anyToken    = scopeRule{}
	adminOnly   = scopeRule{adminOnly: true}
	tenantQuery = scopeRule{tenantQuery: true}
	tenantBody  = scopeRule{tenantBody: true}
	tenantItems = scopeRule{tenantItems: true}
)

func ownedBy(kind string) scopeRule { return scopeRule{owner: kind} }

// revealing is rule for a route whose answer holds a secret.
func (rule scopeRule) revealing() scopeRule {
	rule.revealsSecret = true
	return rule
}

// scopedRouter registers /v1 routes, each with its scope rule.
type scopedRouter struct {
	r      chi.Router
	d      Deps
	prefix string
	rules  map[string]scopeRule
}

// Method registers h for method and pattern behind authorize(rule).
func (s scopedRouter) Method(method, pattern string, rule scopeRule, h http.Handler) {
	if s.rules != nil {
		s.rules[method+" "+s.prefix+pattern] = rule
	}
	s.r.With(authorize(s.d, rule)).Method(method, pattern, h)
}

// authorize is the one place a request's scope is decided: an admin token
// reaches everything; a tenant token only its own tenant's objects and
// lists, and no admin-only route; a read-only token changes nothing and
// reveals no secret. It runs after routing, so the path's {id} is known.
func authorize(d Deps, rule scopeRule) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p, ok := principalFrom(r)
			if !ok {
				// Every /v1 request is authenticated first; one that is not
				// reached a route outside the token check by mistake.
				writeProblem(w, r, d.Logger, errUnauthorized)
				return
			}
			if err := checkScope(r, d, rule, p); err != nil {
				writeProblem(w, r, d.Logger, err)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

func checkScope(r *http.Request, d Deps, rule scopeRule, p Principal) error {
	if !p.Admin() && !p.tenantBound() {
		d.Logger.ErrorContext(r.Context(), "principal_without_scope", slog.String("name", p.Name), slog.String("scope", p.Scope))
		return errNoScope
	}
	if !p.Admin() && rule.adminOnly {
		return errAdminOnly
	}
	if p.ReadOnly && rule.revealsSecret {
		return errReadOnlySecret
	}
	if p.ReadOnly && !safeMethod(r.Method) {
		return errReadOnly
	}
	if p.Admin() {
		if rule.owner == store.OwnerEndpoint {
			// The customer endpoint routes never reach an operational
			// endpoint, whoever asks: its own routes are
			// /v1/operational-endpoints.
			tenant, err := d.Store.OwnerTenant(r.Context(), rule.owner, chi.URLParam(r, "id"))
			if err != nil {
				return err
			}
			if tenant == store.OperationalTenant {
				return store.ErrNotFound
			}
		}
		return nil
	}
	if rule.tenantQuery {
		if t := r.URL.Query().Get("tenant_id"); t != "" && t != p.TenantID {
			return &otherTenantError{field: "tenant_id"}
		}
	}
	if rule.owner != "" {
		tenant, err := d.Store.OwnerTenant(r.Context(), rule.owner, chi.URLParam(r, "id"))
		if err != nil {
			return err
		}
		if tenant != p.TenantID {
			return store.ErrNotFound
		}
	}
	return nil
}

// requestTenants is whose rows a request reads or changes: a tenant
// principal's own tenant's, whatever the query says (checkScope refused a
// tenant_id naming another); an admin's, the tenant the query's tenant_id
// names, or every tenant's when it names none. A request without a scoped
// principal reads no tenant's rows.
func requestTenants(r *http.Request) store.Tenants {
	p, _ := principalFrom(r)
	switch {
	case p.tenantBound():
		return store.OneTenant(p.TenantID)
	case !p.Admin():
		return store.Tenants{}
	}
	if t := r.URL.Query().Get("tenant_id"); t != "" {
		return store.OneTenant(t)
	}
	return store.AllTenants()
}

// allowTrafficClass refuses a tenant principal's traffic_class (in field)
// unless an admin made the class tenant_selectable: a class decides how
// leniently the breaker and the auth rule treat the endpoint. Creating, a
// tenant may also name auto, what an endpoint gets without a class;
// changing one, it may not, as auto would undo an admin's choice. An admin
// may name any class.
func allowTrafficClass(r *http.Request, d Deps, field, class string, creating bool) error {
	p, _ := principalFrom(r)
	if p.Admin() || creating && class == trafficclass.Auto {
		return nil
	}
	c, err := d.Store.GetClass(r.Context(), class)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return &classNotSelectableError{field: field}
	case err != nil:
		return err
	case !c.TenantSelectable:
		return &classNotSelectableError{field: field}
	}
	return nil
}

// allowTenant refuses a request whose body field names another tenant than
// its tenant principal's (routes with the tenantBody rule); an admin may
// name any tenant.
func allowTenant(r *http.Request, field, tenant string) error {
	p, _ := principalFrom(r)
	if p.Admin() || p.tenantBound() && tenant == p.TenantID {
		return nil
	}
	return &otherTenantError{field: field}
}
