package api

import (
	_ "embed"
	"net/http"
)

// openAPIDocument is the OpenAPI 3.1 description of every route, kept true by
// the TestOpenAPI* tests: every registered route is documented and every
// documented one registered, examples match their schemas, field schemas
// agree with validate.go, and every request and response of the API tests
// is checked against it, every documented status included.
//
//go:embed openapi.json
var openAPIDocument []byte

// OpenAPIDocument returns the embedded OpenAPI document.
func OpenAPIDocument() []byte { return openAPIDocument }

func handleOpenAPI() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(openAPIDocument)
	})
}
