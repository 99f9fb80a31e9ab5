package webhook

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"

	"github.com/dispatch-webhooks/dispatch/domain"
)

// forbiddenRange is a range netip's predicates (IsLoopback, IsPrivate,
// IsLinkLocalUnicast, IsMulticast, IsUnspecified, ...) do not cover but an
// endpoint on the public internet never uses, with the name an error
// gives it.
type forbiddenRange struct {
	prefix netip.Prefix
	name   string
}

var extraForbidden = []forbiddenRange{
	{netip.MustParsePrefix("0.0.0.0/8"), `"this network"`},               // 0.x reaches the local host on Linux
	{netip.MustParsePrefix("100.64.0.0/10"), "carrier-grade NAT"},        // internal to a provider (RFC 6598)
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignments"}, // RFC 6890
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking"},             // used internally (RFC 2544)
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},                   // with 255.255.255.255 broadcast
	{netip.MustParsePrefix("::/96"), "IPv4-compatible"},                  // deprecated, embeds any IPv4
	{netip.MustParsePrefix("64:ff9b:1::/48"), "local-use NAT64"},         // RFC 8215
	{netip.MustParsePrefix("100::/64"), "discard-only"},                  // RFC 6666
	{netip.MustParsePrefix("2001::/32"), "Teredo"},                       // embeds an arbitrary IPv4
	{netip.MustParsePrefix("2002::/16"), "6to4"},                         // embeds an arbitrary IPv4
	{netip.MustParsePrefix("fec0::/10"), "site-local"},                   // deprecated, private in practice
}

// nat64 is the well-known NAT64 prefix (RFC 6052). On IPv6-only networks
// public IPv4 endpoints are reached through it, so it is allowed, but only
// for an embedded IPv4 address that is itself allowed.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// metadataAddrs are the cloud metadata services, named in errors because
// they are what an SSRF attempt is usually after.
var metadataAddrs = []netip.Addr{
	netip.MustParseAddr("169.254.169.254"), // AWS, GCP, Azure, and most others
	netip.MustParseAddr("fd00:ec2::254"),   // AWS over IPv6
}

// ForbiddenAddress reports whether the SSRF guard refuses ip as a webhook
// destination: unspecified, loopback, private (RFC 1918, fc00::/7),
// link-local (169.254/16 with cloud metadata services, fe80::/10),
// multicast, broadcast, CGNAT (100.64/10), 0.0.0.0/8, other reserved
// ranges, and IPv6 forms that embed such an IPv4 address (IPv4-mapped,
// NAT64). An invalid address is forbidden: the guard fails closed.
// Policy.Permits makes exceptions to it.
func ForbiddenAddress(ip netip.Addr) bool {
	return forbiddenBecause(ip) != ""
}

// forbiddenBecause names the kind of address ip is when ForbiddenAddress
// refuses it, and returns "" when it does not.
func forbiddenBecause(ip netip.Addr) string {
	if !ip.IsValid() {
		return "invalid"
	}
	// A zone only makes sense on link-local addresses, and Prefix.Contains
	// never matches a zoned address, so drop it before checking.
	ip = ip.WithZone("").Unmap()
	for _, m := range metadataAddrs {
		if ip == m {
			return "cloud metadata service"
		}
	}
	switch {
	case ip.IsUnspecified():
		return "unspecified"
	case ip.IsLoopback():
		return "loopback"
	case ip.IsPrivate():
		return "private"
	case ip.IsLinkLocalUnicast():
		return "link-local"
	case ip.IsMulticast(): // link- and interface-local multicast included
		return "multicast"
	}
	for _, r := range extraForbidden {
		if r.prefix.Contains(ip) {
			return r.name
		}
	}
	if nat64.Contains(ip) {
		b := ip.As16()
		if inner := forbiddenBecause(netip.AddrFrom4([4]byte(b[12:]))); inner != "" {
			return "NAT64 of " + inner
		}
	}
	return ""
}

// Resolver looks up a host's IP addresses; *net.Resolver is one
// (net.DefaultResolver).
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// CheckURL checks a subscription URL when it is created or changed: it must
// be a valid endpoint URL (a *domain.ValidationError on field "url"
// otherwise), and none of its host's addresses may be forbidden (an error
// wrapping domain.ErrForbiddenDestination that names the address). A host
// that does not resolve gives a plain error; the caller decides whether
// that refuses the URL. Policy.CheckURL does the same with exceptions from
// configuration. The Sender checks again at every connection, since DNS
// answers change.
func CheckURL(ctx context.Context, resolver Resolver, rawURL string) error {
	return checkURL(ctx, resolver, rawURL, Policy{})
}

func checkURL(ctx context.Context, resolver Resolver, rawURL string, policy Policy) error {
	if err := domain.ValidateEndpointURL(rawURL); err != nil {
		return &domain.ValidationError{Field: "url", Message: err.Error()}
	}
	u, err := url.Parse(rawURL)
	if err != nil { // ValidateEndpointURL parsed it already
		return &domain.ValidationError{Field: "url", Message: err.Error()}
	}
	if policy.AllowPrivate {
		return nil
	}
	host := u.Hostname()
	if ip, err := netip.ParseAddr(host); err == nil {
		if err := policy.refusal(ip); err != nil {
			return fmt.Errorf("url host: %w", err)
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
		// Any refused address refuses the host: the dialer may pick any.
		if err := policy.refusal(a); err != nil {
			return fmt.Errorf("url host %s: %w", host, err)
		}
	}
	return nil
}
