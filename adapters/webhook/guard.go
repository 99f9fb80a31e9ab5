package webhook

import (
	"context"

	"github.com/dispatch-webhooks/dispatch/ports"
)

var _ ports.EndpointGuard = Guard{}

// Guard is the create- and update-time SSRF check of subscription URLs.
// Give it the same Policy as the Sender, which checks again at connect
// time.
type Guard struct {
	// Policy decides which addresses a URL's host may resolve to. The zero
	// value refuses every address ForbiddenAddress refuses.
	Policy Policy
	// Resolver looks hosts up; nil means net.DefaultResolver.
	Resolver Resolver
}

// CheckURL refuses URLs whose host resolves to an address the Policy does
// not permit (see the package-level CheckURL for the errors).
func (g Guard) CheckURL(ctx context.Context, rawURL string) error {
	return g.Policy.CheckURL(ctx, g.Resolver, rawURL)
}
