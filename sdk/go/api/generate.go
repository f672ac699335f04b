package api

// api.gen.go is hookd's HTTP API as oapi-codegen generates it from the
// OpenAPI document: a type for every schema and a method for every
// operation, named by its operationId. Package hookd wraps it with
// retries, idempotent sends, typed errors and iterators. The generator's
// version is pinned here; `go generate ./...` in sdk/go (or `make sdk` at
// the repository's root) rewrites api.gen.go from the document, and
// TestGeneratedClientIsCurrent fails while it is stale.
//go:generate go run github.com/oapi-codegen/oapi-codegen/v2/cmd/oapi-codegen@v2.8.2 -config oapi-codegen.yaml ../../../internal/api/openapi.json
