package api

import (
	"github.com/go-chi/chi/v5"

	"github.com/hookd/hookd/internal/store"
)

// addRoutes registers every route of the API. It is the one place to read
// to know what the server answers, and what a tenant token may do. When
// rules is not nil it receives each /v1 route's scope rule, keyed
// "METHOD /v1/pattern".
func addRoutes(r chi.Router, d Deps, rules map[string]scopeRule) {
	r.Method("GET", "/healthz", handleHealthz())
	r.Method("GET", "/readyz", handleReadyz(d))
	r.Method("GET", "/openapi.json", handleOpenAPI())

	// The operator dashboard: pages and assets for browsers and the cookie
	// login (dashboard.go, session.go); its data comes from /v1.
	r.Group(func(r chi.Router) {
		r.Use(dashboardHeaders)
		r.Method("GET", "/dashboard", handleDashboardPage(d))
		r.Method("GET", "/dashboard/endpoints/{id}", handleDashboardPage(d))
		r.Method("GET", "/dashboard/messages", handleDashboardPage(d))
		r.Method("GET", "/dashboard/deliveries", handleDashboardPage(d))
		r.Method("GET", "/dashboard/classes", handleDashboardPage(d))
		r.Method("GET", "/dashboard/assets/{name}", handleDashboardAsset(d))
		r.Method("GET", "/dashboard/login", handleLoginPage(d))
		r.Method("POST", "/dashboard/login", handleLogin(d))
		r.Method("POST", "/dashboard/logout", handleLogout(d))
	})

	// River's own UI, off unless the api's --riverui is on (404 then), and
	// only for admin dashboard sessions (riverui.go).
	if d.RiverUI != nil {
		r.Group(func(r chi.Router) {
			r.Use(requireAdminSession(d))
			r.Handle(RiverUIPrefix, d.RiverUI)
			r.Handle(RiverUIPrefix+"/*", d.RiverUI)
		})
	}

	// The tenant portal (portal.go): a static page and its assets, the
	// one-time code's exchange for the portal cookie, the session's
	// description and its logout; its data comes from /v1 as the
	// session's tenant.
	r.Group(func(r chi.Router) {
		r.Use(portalHeaders(d))
		r.Method("GET", "/portal", handlePortalPage())
		r.Method("GET", "/portal/assets/{name}", handlePortalAsset(d))
		r.Method("POST", "/portal/session", handlePortalExchange(d))
		r.Method("GET", "/portal/session", handlePortalSessionInfo(d))
		r.Method("POST", "/portal/logout", handlePortalLogout(d))
	})

	r.Route("/v1", func(r chi.Router) {
		// The dashboard's session cookie is an alternative to the bearer
		// token (session.go).
		r.Use(sessionOrToken(d, requireToken(d)), refuseUnstorable(d))
		// Every /v1 route states what a tenant token may do with it
		// (scope.go); a read-only token changes nothing anywhere, and is
		// refused every route marked revealing: its answer holds a secret.
		v := scopedRouter{r: r, d: d, prefix: "/v1", rules: rules}
		endpoint := ownedBy(store.OwnerEndpoint)

		v.Method("POST", "/endpoints", tenantBody, handleCreateEndpoint(d))
		v.Method("GET", "/endpoints", tenantQuery, handleListEndpoints(d))
		v.Method("GET", "/endpoints/{id}", endpoint, handleGetEndpoint(d))
		v.Method("PATCH", "/endpoints/{id}", endpoint, handleUpdateEndpoint(d))
		v.Method("DELETE", "/endpoints/{id}", endpoint, handleDeleteEndpoint(d))
		v.Method("POST", "/endpoints/{id}/disable", endpoint, handleSetEndpointStatus(d, false))
		v.Method("POST", "/endpoints/{id}/enable", endpoint, handleSetEndpointStatus(d, true))
		v.Method("GET", "/endpoints/{id}/secret", endpoint.revealing(), handleGetEndpointSecret(d))
		v.Method("POST", "/endpoints/{id}/secret/rotate", endpoint, handleRotateSecret(d))
		v.Method("GET", "/endpoints/{id}/attempts", endpoint, handleListEndpointAttempts(d))
		v.Method("POST", "/endpoints/{id}/recover", endpoint, handleRecoverEndpoint(d))
		v.Method("GET", "/endpoints/{id}/stats", endpoint, handleGetEndpointStats(d))
		v.Method("GET", "/endpoints/{id}/breaker", endpoint, handleGetBreaker(d))
		// Operating a breaker changes how the dispatcher treats the
		// endpoint's traffic: an operator's call.
		v.Method("POST", "/endpoints/{id}/breaker/reset", adminOnly, handleOperateBreaker(d, store.OperatorReset))
		v.Method("POST", "/endpoints/{id}/breaker/isolate", adminOnly, handleOperateBreaker(d, store.OperatorIsolate))
		v.Method("GET", "/breakers", tenantQuery, handleListBreakers(d))
		v.Method("GET", "/endpoints/{id}/traffic", endpoint, handleGetTraffic(d))
		v.Method("POST", "/endpoints/{id}/traffic/reclassify", adminOnly, handleReclassify(d))

		v.Method("GET", "/traffic-classes", adminOnly, handleListClasses(d))
		v.Method("POST", "/traffic-classes", adminOnly, handleCreateClass(d))
		v.Method("GET", "/traffic-classes/{name}", adminOnly, handleGetClass(d))
		v.Method("PUT", "/traffic-classes/{name}", adminOnly, handlePutClass(d))
		v.Method("DELETE", "/traffic-classes/{name}", adminOnly, handleDeleteClass(d))
		// Automatic tuning (tuning.go): a class's recommendation, a pass on
		// demand, and the admin's apply or reject of a proposal.
		v.Method("GET", "/traffic-classes/{name}/recommendation", adminOnly, handleGetRecommendation(d))
		v.Method("POST", "/traffic-classes/{name}/tune", adminOnly, handleTuneClass(d))
		v.Method("GET", "/traffic-classes/{name}/tune", adminOnly, handleGetClassTune(d))
		v.Method("POST", "/traffic-classes/{name}/recommendation/apply", adminOnly, handleApplyRecommendation(d))
		v.Method("POST", "/traffic-classes/{name}/recommendation/reject", adminOnly, handleRejectRecommendation(d))
		v.Method("GET", "/traffic-classes/{name}/tunings", adminOnly, handleListTunings(d))

		// The event type catalogue is global: every token may read it (a
		// tenant's senders need its schemas), only admins change it.
		v.Method("GET", "/event-types", anyToken, handleListEventTypes(d))
		v.Method("POST", "/event-types", adminOnly, handleCreateEventType(d))
		v.Method("GET", "/event-types/{name}", anyToken, handleGetEventType(d))
		v.Method("PATCH", "/event-types/{name}", adminOnly, handleUpdateEventType(d))
		v.Method("DELETE", "/event-types/{name}", adminOnly, handleDeleteEventType(d))

		v.Method("POST", "/messages", tenantBody, handleCreateMessage(d))
		v.Method("GET", "/messages", tenantQuery, handleSearchMessages(d))
		v.Method("POST", "/messages/batch", tenantBody, handleCreateMessages(d))
		v.Method("GET", "/messages/{id}", ownedBy(store.OwnerMessage), handleGetMessage(d))

		delivery := ownedBy(store.OwnerDelivery)
		v.Method("GET", "/deliveries", tenantQuery, handleSearchDeliveries(d))
		v.Method("POST", "/deliveries/retry", tenantItems, handleRetryDeliveries(d))
		v.Method("GET", "/deliveries/{id}", delivery, handleGetDelivery(d))
		v.Method("GET", "/deliveries/{id}/attempts", delivery, handleListDeliveryAttempts(d))
		v.Method("POST", "/deliveries/{id}/retry", delivery, handleRetryDelivery(d))
		v.Method("POST", "/deliveries/{id}/skip", delivery, handleSkipDelivery(d))

		// Operational endpoints receive events about the service itself
		// (operational.go): the operator's, never a tenant's.
		v.Method("POST", "/operational-endpoints", adminOnly, handleCreateOperationalEndpoint(d))
		v.Method("GET", "/operational-endpoints", adminOnly, handleListOperationalEndpoints(d))
		v.Method("GET", "/operational-endpoints/{id}", adminOnly, handleGetOperationalEndpoint(d))
		v.Method("PATCH", "/operational-endpoints/{id}", adminOnly, handleUpdateOperationalEndpoint(d))
		v.Method("DELETE", "/operational-endpoints/{id}", adminOnly, handleDeleteOperationalEndpoint(d))
		v.Method("GET", "/operational-endpoints/{id}/secret", adminOnly.revealing(), handleGetOperationalSecret(d))

		v.Method("POST", "/tenants/{tenant_id}/portal-sessions", adminOnly.revealing(), handleCreatePortalSession(d))
		v.Method("GET", "/tenants/{tenant_id}/portal-sessions", adminOnly, handleListPortalSessions(d))
		v.Method("DELETE", "/portal-sessions/{id}", adminOnly, handleEndPortalSession(d))

		v.Method("POST", "/tokens", adminOnly.revealing(), handleCreateToken(d))
		v.Method("GET", "/tokens", adminOnly, handleListTokens(d))
		v.Method("DELETE", "/tokens/{id}", adminOnly, handleRevokeToken(d))
	})
}
