package webhook

import (
	"context"

	"github.com/dispatch-webhooks/dispatch/ports"
)

var _ ports.EndpointGuard = Guard{}

// Guard is the create- and update-time SSRF check of subscription URLs.
type Guard struct {
	// AllowPrivate turns the address check off (dev and tests).
	AllowPrivate bool
	// Resolver looks hosts up; nil means net.DefaultResolver.
	Resolver Resolver
}

// CheckURL refuses URLs whose host resolves to a forbidden address, unless
// AllowPrivate is set.
func (g Guard) CheckURL(ctx context.Context, rawURL string) error {
	if g.AllowPrivate {
		return nil
	}
	return CheckURL(ctx, g.Resolver, rawURL)
}
