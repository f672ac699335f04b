package api

import (
	"errors"
	"fmt"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Input limits. Lengths of free text count characters (code points), as
// the OpenAPI document's maxLength does, not bytes.
const (
	maxURLLength         = 2048
	maxDescriptionLength = 1024
	maxEventTypes        = 100
	maxEventTypeLength   = 128
	maxMetadataKeys      = 50
	maxMetadataKey       = 64
	maxMetadataValue     = 1024
	maxIdempotencyKey    = 256
	defaultPageLimit     = 50
	maxPageLimit         = 250
)

var (
	tenantIDPattern    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$`)
	eventTypePattern   = regexp.MustCompile(`^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$`)
	eventFilterPattern = regexp.MustCompile(`^(\*|[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*(\.\*)?)$`)
	metadataKeyPattern = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)
	classNamePattern   = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)
)

// ValidateTenantID checks a tenant_id as the API does.
func ValidateTenantID(v string) error {
	var fe fieldErrors
	validateTenantID(&fe, "tenant_id", v)
	if len(fe) > 0 {
		return errors.New(fe[0].Message)
	}
	return nil
}

func validateTenantID(fe *fieldErrors, field, v string) {
	switch {
	case v == "":
		fe.add(field, "is required")
	case !tenantIDPattern.MatchString(v):
		fe.add(field, "must be 1-128 characters of letters, digits and . _ : @ -, starting with a letter or digit")
	}
}

// validateEndpointURL checks an endpoint URL's shape; the SSRF guard checks
// where it points.
func validateEndpointURL(fe *fieldErrors, field, raw string) {
	if raw == "" {
		fe.add(field, "is required")
		return
	}
	if utf8.RuneCountInString(raw) > maxURLLength {
		fe.add(field, fmt.Sprintf("must be at most %d characters", maxURLLength))
		return
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		fe.add(field, "is not a valid URL")
	case u.Scheme != "http" && u.Scheme != "https":
		fe.add(field, "must be an absolute http or https URL")
	case u.Host == "" || u.Hostname() == "":
		fe.add(field, "must have a host")
	case u.User != nil:
		fe.add(field, "must not carry credentials; use the signing secret")
	case u.Fragment != "":
		fe.add(field, "must not have a fragment")
	case strings.ContainsAny(raw, " \t\r\n"):
		fe.add(field, "must not contain whitespace")
	}
}

func validateEventType(fe *fieldErrors, field, v string) {
	switch {
	case v == "":
		fe.add(field, "is required")
	case len(v) > maxEventTypeLength:
		fe.add(field, fmt.Sprintf("must be at most %d characters", maxEventTypeLength))
	case !eventTypePattern.MatchString(v):
		fe.add(field, "must be dot-separated names of letters, digits, _ and - (for example invoice.paid)")
	}
}

func validateEventFilters(fe *fieldErrors, field string, vs []string) {
	if len(vs) > maxEventTypes {
		fe.add(field, fmt.Sprintf("must hold at most %d event types", maxEventTypes))
		return
	}
	for i, v := range vs {
		f := fmt.Sprintf("%s[%d]", field, i)
		switch {
		case len(v) > maxEventTypeLength:
			fe.add(f, fmt.Sprintf("must be at most %d characters", maxEventTypeLength))
		case !eventFilterPattern.MatchString(v):
			fe.add(f, `must be an event type (invoice.paid), a prefix pattern (invoice.*) or "*"`)
		}
	}
}

func validateDescription(fe *fieldErrors, field, v string) {
	switch {
	case utf8.RuneCountInString(v) > maxDescriptionLength:
		fe.add(field, fmt.Sprintf("must be at most %d characters", maxDescriptionLength))
	case strings.ContainsRune(v, 0):
		// Postgres text cannot hold NUL.
		fe.add(field, "must not contain NUL characters")
	}
}

func validateTrafficClass(fe *fieldErrors, field, v string) {
	if v != "auto" && !classNamePattern.MatchString(v) {
		fe.add(field, `must be "auto" or a traffic class name`)
	}
}

// validateMetadata keeps metadata inert: bounded, and free of control
// characters, so no value can ever smuggle a header line.
func validateMetadata(fe *fieldErrors, field string, m map[string]string) {
	if len(m) > maxMetadataKeys {
		fe.add(field, fmt.Sprintf("must hold at most %d keys", maxMetadataKeys))
		return
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		v := m[k]
		f := field + "." + k
		switch {
		case len(k) > maxMetadataKey || !metadataKeyPattern.MatchString(k):
			fe.add(field, fmt.Sprintf("key %q must be 1-%d characters of letters, digits, _ . -", k, maxMetadataKey))
		case utf8.RuneCountInString(v) > maxMetadataValue:
			fe.add(f, fmt.Sprintf("must be at most %d characters", maxMetadataValue))
		case strings.IndexFunc(v, unicode.IsControl) >= 0:
			fe.add(f, "must not contain control characters")
		}
	}
}
