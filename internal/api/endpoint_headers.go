package api

import (
	"fmt"
	"maps"
	"net/http"
	"slices"

	"golang.org/x/net/http/httpguts"

	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/secretbox"
)

// validateEndpointHeaders checks an endpoint's own headers: at most
// delivery.MaxEndpointHeaders, each name a valid HTTP token that hookd or
// HTTP does not own (delivery.ReservedHeader), named once whatever its
// case, each value a valid field value of at most
// delivery.MaxEndpointHeaderValue bytes, not starting with the prefix of
// sealed values. A value is never quoted back: it may be a credential.
func validateEndpointHeaders(fe *fieldErrors, field string, h map[string]string) {
	if len(h) > delivery.MaxEndpointHeaders {
		fe.add(field, fmt.Sprintf("must hold at most %d headers", delivery.MaxEndpointHeaders))
		return
	}
	seen := map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(h)) {
		v := h[name]
		f := field + "." + name
		canonical := http.CanonicalHeaderKey(name)
		switch {
		case !httpguts.ValidHeaderFieldName(name):
			fe.add(f, "is not a valid HTTP header name (letters, digits and !#$%&'*+-.^_`|~)")
		case delivery.ReservedHeader(name):
			fe.add(f, "is set by hookd or by HTTP itself (Host, Content-Length, Content-Type, Transfer-Encoding, Connection, Upgrade, TE, Trailer, Proxy-*, Webhook-*) and cannot be set")
		case seen[canonical] != "":
			fe.add(f, fmt.Sprintf("names the same header as %q: header names are case-insensitive", seen[canonical]))
		case len(v) > delivery.MaxEndpointHeaderValue:
			fe.add(f, fmt.Sprintf("must be at most %s", formatBytes(delivery.MaxEndpointHeaderValue)))
		case !httpguts.ValidHeaderFieldValue(v):
			fe.add(f, "is not a valid HTTP field value (no control characters but tab)")
		case secretbox.IsSealed(v):
			// Values are stored sealed when a secret key is set and as they
			// are without one; a plain value with the envelope's prefix
			// would read back as a sealed value that does not open.
			fe.add(f, fmt.Sprintf("must not start with %q, the prefix of values sealed at rest", secretbox.Prefix))
		}
		if seen[canonical] == "" {
			seen[canonical] = name
		}
	}
}
