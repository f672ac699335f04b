package api

import (
	"context"
	"errors"
	"net/url"

	"github.com/hookd/hookd/internal/delivery"
)

// checkTarget applies the SSRF guard to an endpoint URL (already validated)
// at registration: a URL whose host is, or resolves to, an address the
// dispatcher would refuse to dial is a 400 on the url field naming the
// address and why. The dispatcher checks every dialed address again, so
// DNS changes after registration cannot get around the guard.
func checkTarget(ctx context.Context, d Deps, raw string) error {
	if d.AllowPrivateTargets {
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return invalid("url", "is not a valid URL")
	}
	var be *delivery.BlockedError
	if err := delivery.CheckHost(ctx, d.Resolver, u.Hostname()); errors.As(err, &be) {
		return invalid("url", be.Explain())
	}
	return nil
}
