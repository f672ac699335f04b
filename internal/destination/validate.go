package destination

import (
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
)

// Bounds of the fields every type shares.
const (
	maxNameLen = 255
	maxURLLen  = 2048
	maxCredLen = 4096
)

// checkURL parses a broker URL of one of schemes with a host and
// optional port; userinfo is refused (credentials have fields of their
// own, sealed at rest, and a URL is shown on reads).
func checkURL(field, raw string, schemes ...string) (*url.URL, error) {
	if raw == "" {
		return nil, fieldErr(field, "required")
	}
	if len(raw) > maxURLLen {
		return nil, fieldErr(field, "longer than %d characters", maxURLLen)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fieldErr(field, "not a URL")
	}
	ok := false
	for _, s := range schemes {
		ok = ok || u.Scheme == s
	}
	if !ok {
		return nil, fieldErr(field, "scheme must be one of %s", strings.Join(schemes, ", "))
	}
	if u.User != nil {
		return nil, fieldErr(field, "must not carry credentials: use username and password")
	}
	if err := checkHostPort(field, u.Host); err != nil {
		return nil, err
	}
	return u, nil
}

// checkHostPort checks "host[:port]".
func checkHostPort(field, hp string) error {
	if hp == "" {
		return fieldErr(field, "host required")
	}
	host, port := hp, ""
	if h, p, err := net.SplitHostPort(hp); err == nil {
		host, port = h, p
	} else if strings.Contains(strings.Trim(hp, "[]"), ":") && !strings.HasPrefix(hp, "[") {
		return fieldErr(field, "host %q: an IPv6 address must be in brackets", hp)
	}
	host = strings.Trim(host, "[]")
	if host == "" {
		return fieldErr(field, "host required")
	}
	if port != "" {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return fieldErr(field, "port %q out of range", port)
		}
	}
	return nil
}

// hostOf is the host of "host[:port]" without brackets.
func hostOf(hp string) string {
	if h, _, err := net.SplitHostPort(hp); err == nil {
		return h
	}
	return strings.Trim(hp, "[]")
}

// checkName checks a required name of at most max bytes of printable
// characters, without spaces.
func checkName(field, v string, max int) error {
	switch {
	case v == "":
		return fieldErr(field, "required")
	case len(v) > max:
		return fieldErr(field, "longer than %d characters", max)
	case strings.IndexFunc(v, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0:
		return fieldErr(field, "must not contain spaces or control characters")
	}
	return nil
}

// checkCred checks a credential's length; empty is allowed.
func checkCred(field, v string) error {
	if len(v) > maxCredLen {
		return fieldErr(field, "longer than %d characters", maxCredLen)
	}
	if strings.ContainsAny(v, "\x00") {
		return fieldErr(field, "must not contain NUL")
	}
	return nil
}

// pairedCred requires a password with a username and the other way round.
func pairedCred(username, password string) error {
	if err := checkCred("username", username); err != nil {
		return err
	}
	if err := checkCred("password", password); err != nil {
		return err
	}
	if (username == "") != (password == "") {
		if username == "" {
			return fieldErr("username", "required with password")
		}
		return fieldErr("password", "required with username")
	}
	return nil
}

var natsSubject = regexp.MustCompile(`^[^\s.*>]+(\.[^\s.*>]+)*$`)

// clone copies a credentials map (nil stays nil).
func creds(kv ...string) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			m[kv[i]] = kv[i+1]
		}
	}
	return m
}
