package webhook

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"syscall"

	"github.com/dispatch-webhooks/dispatch/domain"
)

// extraForbidden lists what netip's predicates (IsLoopback, IsPrivate,
// IsLinkLocalUnicast, IsMulticast, IsUnspecified, ...) do not cover but an
// endpoint on the public internet never uses.
var extraForbidden = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),      // "this network": 0.x reaches the local host on Linux
	netip.MustParsePrefix("100.64.0.0/10"),  // carrier-grade NAT, internal to a provider (RFC 6598)
	netip.MustParsePrefix("192.0.0.0/24"),   // IETF protocol assignments (RFC 6890)
	netip.MustParsePrefix("198.18.0.0/15"),  // benchmarking networks, used internally (RFC 2544)
	netip.MustParsePrefix("240.0.0.0/4"),    // reserved, with 255.255.255.255 broadcast
	netip.MustParsePrefix("::/96"),          // IPv4-compatible (deprecated), embeds any IPv4
	netip.MustParsePrefix("64:ff9b:1::/48"), // local-use NAT64 (RFC 8215)
	netip.MustParsePrefix("100::/64"),       // discard-only (RFC 6666)
	netip.MustParsePrefix("2001::/32"),      // Teredo, embeds an arbitrary IPv4
	netip.MustParsePrefix("2002::/16"),      // 6to4, embeds an arbitrary IPv4
	netip.MustParsePrefix("fec0::/10"),      // site-local (deprecated), private in practice
}

// nat64 is the well-known NAT64 prefix (RFC 6052). On IPv6-only networks
// public IPv4 endpoints are reached through it, so it is allowed, but only
// for an embedded IPv4 address that is itself allowed.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// ForbiddenAddress reports whether the SSRF guard refuses ip as a webhook
// destination: unspecified, loopback, private (RFC 1918, fc00::/7),
// link-local (169.254/16 with cloud metadata services, fe80::/10),
// multicast, broadcast, CGNAT (100.64/10), 0.0.0.0/8, other reserved
// ranges, and IPv6 forms that embed such an IPv4 address (IPv4-mapped,
// NAT64). An invalid address is forbidden: the guard fails closed.
func ForbiddenAddress(ip netip.Addr) bool {
	if !ip.IsValid() {
		return true
	}
	// A zone only makes sense on link-local addresses, and Prefix.Contains
	// never matches a zoned address, so drop it before checking.
	ip = ip.WithZone("").Unmap()
	if ip.IsUnspecified() || ip.IsLoopback() || ip.IsPrivate() ||
		ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsInterfaceLocalMulticast() || ip.IsMulticast() {
		return true
	}
	for _, p := range extraForbidden {
		if p.Contains(ip) {
			return true
		}
	}
	if nat64.Contains(ip) {
		b := ip.As16()
		return ForbiddenAddress(netip.AddrFrom4([4]byte(b[12:])))
	}
	return false
}

// guardDial is a net.Dialer Control function: it runs after DNS resolution,
// on the exact address about to be connected, so neither a hostname that
// resolves to an internal address nor DNS rebinding between a check and the
// connection gets through.
func guardDial(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: cannot parse dialled address %q", domain.ErrForbiddenDestination, address)
	}
	if ForbiddenAddress(ap.Addr()) {
		return fmt.Errorf("%w: %s", domain.ErrForbiddenDestination, ap.Addr())
	}
	return nil
}

// Resolver looks up a host's IP addresses; *net.Resolver is one
// (net.DefaultResolver).
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// CheckURL checks a subscription URL when it is created or changed: it must
// be a valid endpoint URL (a *domain.ValidationError on field "url"
// otherwise), and none of its host's addresses may be forbidden (an error
// wrapping domain.ErrForbiddenDestination). A host that does not resolve
// gives a plain error; the caller decides whether that refuses the URL.
// Callers skip CheckURL when private targets are allowed. The Sender checks
// again at every connection, since DNS answers change.
func CheckURL(ctx context.Context, resolver Resolver, rawURL string) error {
	if err := domain.ValidateEndpointURL(rawURL); err != nil {
		return &domain.ValidationError{Field: "url", Message: err.Error()}
	}
	u, err := url.Parse(rawURL)
	if err != nil { // ValidateEndpointURL parsed it already
		return &domain.ValidationError{Field: "url", Message: err.Error()}
	}
	host := u.Hostname()
	if ip, err := netip.ParseAddr(host); err == nil {
		if ForbiddenAddress(ip) {
			return fmt.Errorf("url host %s: %w", host, domain.ErrForbiddenDestination)
		}
		return nil
	}
	if resolver == nil {
		resolver = net.DefaultResolver
	}
	addrs, err := resolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return fmt.Errorf("url host %s: resolve: %w", host, err)
	}
	if len(addrs) == 0 {
		return fmt.Errorf("url host %s: resolves to no address", host)
	}
	for _, a := range addrs {
		// Any forbidden address refuses the host: the dialer may pick any.
		if ForbiddenAddress(a) {
			return fmt.Errorf("url host %s resolves to %s: %w", host, a, domain.ErrForbiddenDestination)
		}
	}
	return nil
}
