package delivery

import (
	"net/http"
	"strings"
)

// Limits on an endpoint's own headers.
const (
	// MaxEndpointHeaders is how many headers an endpoint may add.
	MaxEndpointHeaders = 20
	// MaxEndpointHeaderValue is the longest value, in bytes, of one.
	MaxEndpointHeaderValue = 4 << 10
)

// reservedHeaders are the names an endpoint may not set: the ones hookd
// sets on every delivery (the content type and the webhook-* headers, whose
// meaning the receiver's verification depends on) and the ones HTTP itself
// owns (framing, connection management, the target host).
var reservedHeaders = map[string]bool{
	"Host":              true,
	"Content-Length":    true,
	"Content-Type":      true,
	"Transfer-Encoding": true,
	"Connection":        true,
	"Upgrade":           true,
	"Te":                true,
	"Trailer":           true,
}

// ReservedHeader reports whether an endpoint may not set the header name
// (compared case-insensitively): Host, Content-Length, Content-Type,
// Transfer-Encoding, Connection, Upgrade, TE, Trailer, every Proxy-* and
// every Webhook-* header.
func ReservedHeader(name string) bool {
	c := http.CanonicalHeaderKey(name)
	return reservedHeaders[c] || hasFoldPrefix(name, "proxy-") || hasFoldPrefix(name, "webhook-")
}

func hasFoldPrefix(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// setEndpointHeaders adds an endpoint's headers to h, skipping any reserved
// name (the API refuses them; this keeps a row written some other way from
// overriding what hookd sends).
func setEndpointHeaders(h http.Header, headers map[string]string) {
	for name, value := range headers {
		if !ReservedHeader(name) {
			h.Set(name, value)
		}
	}
}
