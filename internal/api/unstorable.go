package api

import (
	"net/http"
	"strings"
	"unicode/utf8"
)

// refuseUnstorable answers 404 to a request whose path holds text no
// Postgres text value can (a NUL byte, or bytes that are not UTF-8): no
// resource has such a name, and the handlers would pass it to a query.
// Query parameters are checked by the handlers that read them (unknown
// ones are ignored), body fields by their validators (encoding/json
// already replaces bytes that are not UTF-8 in strings).
func refuseUnstorable(d Deps) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !storable(r.URL.Path) {
				writeProblem(w, r, d.Logger, errRouteNotFound)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// storable reports whether s can be a Postgres text value.
func storable(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}
