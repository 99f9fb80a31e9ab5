package webhook

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"syscall"

	"github.com/dispatch-webhooks/dispatch/domain"
)

// Policy is the SSRF guard's decision on destination addresses. The Guard
// applies it when a subscription's URL is created or changed, and the
// Sender applies it again to every address it connects to, so both places
// share one rule. The zero value permits only what ForbiddenAddress does
// not refuse.
type Policy struct {
	// AllowPrivate permits every address (DISPATCH_ALLOW_PRIVATE_TARGETS;
	// `dispatch dev` and most tests set it).
	AllowPrivate bool
	// Allowed are ranges permitted although ForbiddenAddress refuses them
	// (DISPATCH_ALLOWED_TARGETS), such as 10.20.0.0/16 for endpoints on an
	// internal network. ParseAllowedTargets builds it from configuration.
	Allowed []netip.Prefix
}

// Validate reports every entry of Allowed that could not have come from
// ParseAllowedTargets (see CheckAllowedTarget), naming it by its 1-based
// position.
func (p Policy) Validate() error {
	var errs []error
	for i, prefix := range p.Allowed {
		if err := CheckAllowedTarget(prefix); err != nil {
			errs = append(errs, fmt.Errorf("entry %d %s: %w", i+1, prefix, err))
		}
	}
	return errors.Join(errs...)
}

// Permits reports whether a webhook may be sent to addr. An invalid
// address is never permitted: the guard fails closed. An IPv4-mapped IPv6
// address is matched against Allowed as the IPv4 address it is; the other
// IPv6 forms that carry an IPv4 address (NAT64, 6to4, ...) are not: an
// allowed range speaks of the addresses Dispatch connects to itself, not
// of those a translator would connect to for it.
func (p Policy) Permits(addr netip.Addr) bool {
	return p.refuses(addr) == ""
}

// refuses returns "" when p permits addr, and otherwise the kind of
// address that makes it refused.
func (p Policy) refuses(addr netip.Addr) string {
	if !addr.IsValid() {
		return "invalid"
	}
	if p.AllowPrivate {
		return ""
	}
	why := forbiddenBecause(addr)
	if why == "" {
		return ""
	}
	bare := addr.WithZone("").Unmap()
	for _, allowed := range p.Allowed {
		if allowed.Contains(bare) {
			return ""
		}
	}
	return why
}

// CheckURL is the package-level CheckURL with p deciding which addresses
// are permitted. When p permits every address the host is not resolved,
// since no answer could refuse it.
func (p Policy) CheckURL(ctx context.Context, resolver Resolver, rawURL string) error {
	return checkURL(ctx, resolver, rawURL, p)
}

// errDialRefused is the connect-time refusal. It names no address and no
// kind: the address is what the endpoint's name resolved to just now.
var errDialRefused = &refusedDestination{text: domain.ErrForbiddenDestination.Error() + ": " + refusedClass}

// controlDial is a net.Dialer Control function: it runs after DNS
// resolution, on the exact address about to be connected, so neither a
// hostname that resolves to an internal address nor DNS rebinding between
// the create-time check and the connection gets through.
func (p Policy) controlDial(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil || p.refuses(ap.Addr()) != "" {
		return errDialRefused
	}
	return nil
}

// ParseAllowedTargets parses a comma-separated list of CIDR ranges and
// single IP addresses ("127.0.0.0/8, 10.20.0.0/16, fd00::1") into
// Policy.Allowed. It is strict, because a typo here widens or silently
// narrows what the SSRF guard lets through: every entry must parse, must
// not be empty, must have no bits set past its prefix length (10.20.1.0/16
// is refused with the range it probably means), and must not carry an IPv6
// zone or write an IPv4 range in IPv4-mapped IPv6 form. An empty or
// all-blank string is an empty list. The error names the 1-based entry.
func ParseAllowedTargets(s string) ([]netip.Prefix, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	out := make([]netip.Prefix, 0, len(parts))
	for i, part := range parts {
		entry := strings.TrimSpace(part)
		p, err := parseAllowedTarget(entry)
		if err != nil {
			return nil, fmt.Errorf("entry %d %q: %w", i+1, entry, err)
		}
		out = append(out, p)
	}
	return out, nil
}

func parseAllowedTarget(entry string) (netip.Prefix, error) {
	if entry == "" {
		return netip.Prefix{}, errors.New("empty; want a CIDR range such as 10.0.0.0/8 or an IP address")
	}
	if strings.Contains(entry, "/") {
		p, err := netip.ParsePrefix(entry)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("not a CIDR range (%w)", err)
		}
		return p, CheckAllowedTarget(p)
	}
	a, err := netip.ParseAddr(entry)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("not an IP address or CIDR range (%w)", err)
	}
	if a.Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("has an IPv6 zone; write the address without %%%s", a.Zone())
	}
	p := netip.PrefixFrom(a, a.BitLen())
	return p, CheckAllowedTarget(p)
}

// CheckAllowedTarget reports why p cannot be an entry of Policy.Allowed
// (nil when it can): the zero Prefix, bits set past the prefix length, or
// an IPv4 range in IPv4-mapped IPv6 form, which would never match since
// addresses are compared unmapped.
func CheckAllowedTarget(p netip.Prefix) error {
	switch {
	case !p.IsValid():
		return errors.New("not a valid CIDR range")
	case p.Addr().Is4In6():
		return errors.New("IPv4-mapped IPv6 form never matches; write it in IPv4 form")
	case p != p.Masked():
		return fmt.Errorf("has bits set past the /%d prefix; did you mean %s?", p.Bits(), p.Masked())
	}
	return nil
}
