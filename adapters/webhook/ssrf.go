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
	{netip.MustParsePrefix("100::/64"), "discard-only"},                  // RFC 6666
	{netip.MustParsePrefix("fec0::/10"), "site-local"},                   // deprecated, private in practice
}

// ipv4Embedding is an IPv6 form that carries IPv4 addresses, which a
// translator, a tunnel or the host's own stack may reach in place of the
// IPv6 address itself. IPv4-mapped addresses (::ffff:0:0/96) are not
// listed: netip unmaps them and they are checked as the IPv4 address they
// are, which is what the dialer connects to.
type ipv4Embedding struct {
	prefix netip.Prefix
	name   string
	// carried returns the IPv4 addresses an address of the form carries;
	// nil when they cannot be told from the address alone.
	carried func(b [16]byte) []netip.Addr
	// public is true for the one form through which public IPv4 endpoints
	// are legitimately reached (NAT64 on IPv6-only networks). Every other
	// form is refused whatever it carries: each is deprecated, reserved or
	// local, and no public endpoint needs it.
	public bool
}

// lastFour is the IPv4 address in the low 32 bits, where the /96 forms
// put it.
func lastFour(b [16]byte) []netip.Addr {
	return []netip.Addr{netip.AddrFrom4([4]byte(b[12:16]))}
}

var ipv4Embeddings = []ipv4Embedding{
	{netip.MustParsePrefix("64:ff9b::/96"), "NAT64", lastFour, true},               // RFC 6052
	{netip.MustParsePrefix("::ffff:0:0:0/96"), "IPv4-translated", lastFour, false}, // RFC 2765 (SIIT)
	{netip.MustParsePrefix("::/96"), "IPv4-compatible", lastFour, false},           // deprecated (RFC 4291)
	{netip.MustParsePrefix("64:ff9b:1::/48"), "local-use NAT64", nil, false},       // RFC 8215; where the IPv4 address sits depends on the operator's prefix length
	{netip.MustParsePrefix("2002::/16"), "6to4", func(b [16]byte) []netip.Addr { // RFC 3056: bits 16-47
		return []netip.Addr{netip.AddrFrom4([4]byte(b[2:6]))}
	}, false},
	{netip.MustParsePrefix("2001::/32"), "Teredo", func(b [16]byte) []netip.Addr { // RFC 4380: server in bits 32-63, client obfuscated in the last 32
		client := [4]byte(b[12:16])
		for i := range client {
			client[i] ^= 0xff
		}
		return []netip.Addr{netip.AddrFrom4([4]byte(b[4:8])), netip.AddrFrom4(client)}
	}, false},
}

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
// ranges, IPv6 outside 2000::/3, and the IPv6 forms that carry an IPv4
// address: IPv4-mapped and NAT64 (64:ff9b::/96) as the IPv4 address they
// carry, IPv4-translated, IPv4-compatible, local-use NAT64, 6to4 and
// Teredo always. An invalid address is forbidden: the guard fails closed.
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
	for _, e := range ipv4Embeddings {
		if !e.prefix.Contains(ip) {
			continue
		}
		if e.carried != nil {
			for _, inner := range e.carried(ip.As16()) {
				if why := forbiddenBecause(inner); why != "" {
					return e.name + " form of " + why
				}
			}
		}
		if !e.public {
			return e.name
		}
		return ""
	}
	if ip.Is6() && !globalUnicast.Contains(ip) {
		return "reserved"
	}
	return ""
}

// globalUnicast holds every IPv6 address IANA allocates for use on the
// internet (RFC 4291 §2.4); the rest is reserved, special-purpose or
// covered above.
var globalUnicast = netip.MustParsePrefix("2000::/3")

// Resolver looks up a host's IP addresses; *net.Resolver is one
// (net.DefaultResolver).
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// CheckURL checks a subscription URL when it is created or changed: it must
// be a valid endpoint URL (a *domain.ValidationError on field "url"
// otherwise), and none of its host's addresses may be forbidden (an error
// wrapping domain.ErrForbiddenDestination whose text names the kind of an
// IP literal, and never what a name resolved to). A host that does not
// resolve gives a plain error, which carries the resolver's own words; the
// caller decides whether that refuses the URL, and what to show of it.
// Policy.CheckURL does the same with exceptions from configuration. The
// Sender checks again at every connection, since DNS answers change.
func CheckURL(ctx context.Context, resolver Resolver, rawURL string) error {
	return checkURL(ctx, resolver, rawURL, Policy{})
}

// refusedDestination is the SSRF guard's refusal. Its text reaches the
// subscription's owner (as a create error or an attempt's error), so it
// names an address only when the owner wrote that address in the URL:
// telling what a name resolved to would let a caller map the network
// Dispatch runs in, one name at a time.
type refusedDestination struct{ text string }

func (e *refusedDestination) Error() string { return e.text }
func (e *refusedDestination) Unwrap() error { return domain.ErrForbiddenDestination }

// refusedClass is what a refusal says of an address it must not name.
const refusedClass = "a private, loopback or reserved address"

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
		if why := policy.refuses(ip); why != "" {
			return &refusedDestination{text: fmt.Sprintf("host %s is not an allowed destination (%s)", host, why)}
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
		if policy.refuses(a) != "" {
			return &refusedDestination{text: "host resolves to " + refusedClass}
		}
	}
	return nil
}
