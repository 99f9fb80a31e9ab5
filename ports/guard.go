package ports

import "context"

// EndpointGuard decides whether a subscription may target a URL: it resolves
// the host and refuses addresses the SSRF guard forbids. The sender checks
// again at connect time, because DNS answers change.
type EndpointGuard interface {
	// CheckURL returns an error wrapping domain.ErrForbiddenDestination when
	// the URL's host resolves to a forbidden address, and another error when
	// it cannot be resolved at all. The text of a refusal is shown to the
	// caller as it is, so it never names what a name resolved to; the
	// text of a resolution failure is not shown.
	CheckURL(ctx context.Context, rawURL string) error
}
