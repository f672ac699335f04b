package api

import (
	"github.com/go-chi/chi/v5"

	"github.com/hookd/hookd/internal/store"
)

// addRoutes registers every route of the API. It is the one place to read
// to know what the server answers.
func addRoutes(r chi.Router, d Deps) {
	r.Method("GET", "/healthz", handleHealthz())
	r.Method("GET", "/readyz", handleReadyz(d))
	r.Method("GET", "/openapi.json", handleOpenAPI())

	// The operator dashboard: pages and assets for browsers and the cookie
	// login (dashboard.go, session.go); its data comes from /v1.
	r.Group(func(r chi.Router) {
		r.Use(dashboardHeaders)
		r.Method("GET", "/dashboard", handleDashboardPage(d))
		r.Method("GET", "/dashboard/endpoints/{id}", handleDashboardPage(d))
		r.Method("GET", "/dashboard/assets/{name}", handleDashboardAsset(d))
		r.Method("GET", "/dashboard/login", handleLoginPage(d))
		r.Method("POST", "/dashboard/login", handleLogin(d))
		r.Method("POST", "/dashboard/logout", handleLogout(d))
	})

	r.Route("/v1", func(r chi.Router) {
		// The dashboard's session cookie is an alternative to the bearer
		// token (session.go).
		r.Use(sessionOrToken(d, requireToken(d)), refuseUnstorable(d))

		r.Method("POST", "/endpoints", handleCreateEndpoint(d))
		r.Method("GET", "/endpoints", handleListEndpoints(d))
		r.Method("GET", "/endpoints/{id}", handleGetEndpoint(d))
		r.Method("PATCH", "/endpoints/{id}", handleUpdateEndpoint(d))
		r.Method("DELETE", "/endpoints/{id}", handleDeleteEndpoint(d))
		r.Method("POST", "/endpoints/{id}/disable", handleSetEndpointStatus(d, false))
		r.Method("POST", "/endpoints/{id}/enable", handleSetEndpointStatus(d, true))
		r.Method("GET", "/endpoints/{id}/secret", handleGetEndpointSecret(d))
		r.Method("POST", "/endpoints/{id}/secret/rotate", handleRotateSecret(d))
		r.Method("GET", "/endpoints/{id}/attempts", handleListEndpointAttempts(d))
		r.Method("GET", "/endpoints/{id}/stats", handleGetEndpointStats(d))
		r.Method("GET", "/endpoints/{id}/breaker", handleGetBreaker(d))
		r.Method("POST", "/endpoints/{id}/breaker/reset", handleOperateBreaker(d, store.OperatorReset))
		r.Method("POST", "/endpoints/{id}/breaker/isolate", handleOperateBreaker(d, store.OperatorIsolate))
		r.Method("GET", "/breakers", handleListBreakers(d))
		r.Method("GET", "/endpoints/{id}/traffic", handleGetTraffic(d))
		r.Method("POST", "/endpoints/{id}/traffic/reclassify", handleReclassify(d))

		r.Method("GET", "/traffic-classes", handleListClasses(d))
		r.Method("POST", "/traffic-classes", handleCreateClass(d))
		r.Method("GET", "/traffic-classes/{name}", handleGetClass(d))
		r.Method("PUT", "/traffic-classes/{name}", handlePutClass(d))
		r.Method("DELETE", "/traffic-classes/{name}", handleDeleteClass(d))

		r.Method("POST", "/messages", handleCreateMessage(d))
		r.Method("GET", "/messages/{id}", handleGetMessage(d))

		r.Method("GET", "/deliveries/{id}", handleGetDelivery(d))
		r.Method("GET", "/deliveries/{id}/attempts", handleListDeliveryAttempts(d))
		r.Method("POST", "/deliveries/{id}/retry", handleRetryDelivery(d))
	})
}
