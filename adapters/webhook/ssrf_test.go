package webhook_test

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"net/url"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatch-webhooks/dispatch/adapters/webhook"
	"github.com/dispatch-webhooks/dispatch/domain"
)

func TestForbiddenAddress(t *testing.T) {
	t.Parallel()
	tests := []struct {
		ip        string
		forbidden bool
	}{
		// Public.
		{"93.184.216.34", false},
		{"8.8.8.8", false},
		{"1.1.1.1", false},
		{"100.63.255.255", false}, // just below CGNAT
		{"100.128.0.0", false},    // just above CGNAT
		{"172.15.255.255", false}, // just below 172.16/12
		{"172.32.0.0", false},     // just above
		{"2606:4700:4700::1111", false},
		{"::ffff:8.8.8.8", false},   // IPv4-mapped public
		{"64:ff9b::808:808", false}, // NAT64 of 8.8.8.8
		{"2a00:1450:4001:80e::200e", false},

		// Loopback, unspecified, "this network".
		{"127.0.0.1", true},
		{"127.255.255.254", true},
		{"::1", true},
		{"0.0.0.0", true},
		{"0.1.2.3", true},
		{"::", true},
		// Private (RFC 1918, unique local).
		{"10.0.0.1", true},
		{"172.16.0.1", true},
		{"172.31.255.255", true},
		{"192.168.1.1", true},
		{"fc00::1", true},
		{"fd12:3456:789a::1", true},
		// Link-local, cloud metadata.
		{"169.254.169.254", true},
		{"169.254.0.1", true},
		{"fe80::1", true},
		{"fe80::1%eth0", true},
		// CGNAT, broadcast, reserved, benchmarking, protocol assignments.
		{"100.64.0.1", true},
		{"100.127.255.255", true},
		{"255.255.255.255", true},
		{"240.0.0.1", true},
		{"198.18.0.1", true},
		{"192.0.0.8", true},
		// Multicast.
		{"224.0.0.1", true},
		{"239.255.255.250", true},
		{"ff02::1", true},
		{"ff05::2", true},
		// IPv6 forms embedding a forbidden IPv4.
		{"::ffff:127.0.0.1", true},
		{"::ffff:10.0.0.1", true},
		{"::ffff:169.254.169.254", true},
		{"::ffff:0.0.0.0", true},
		{"::127.0.0.1", true},         // IPv4-compatible
		{"64:ff9b::7f00:1", true},     // NAT64 of 127.0.0.1
		{"64:ff9b::a9fe:a9fe", true},  // NAT64 of 169.254.169.254
		{"64:ff9b:1::1", true},        // local-use NAT64
		{"2002:7f00:1::1", true},      // 6to4
		{"2001:0:4136:e378::1", true}, // Teredo
		// IPv4-translated (::ffff:0:0:0/96), refused whatever it carries.
		{"::ffff:0:127.0.0.1", true},
		{"::ffff:0:7f00:1", true},
		{"::ffff:0:10.0.0.1", true},
		{"::ffff:0:169.254.169.254", true},
		{"::ffff:0:8.8.8.8", true},
		{"::ffff:0:0:0", true},
		// The other embedding forms carrying a public IPv4 address: only
		// NAT64 passes it through.
		{"::8.8.8.8", true},                 // IPv4-compatible
		{"2002:808:808::1", true},           // 6to4 of 8.8.8.8
		{"2001:0:808:808::f7f7:f7f7", true}, // Teredo, server and client 8.8.8.8
		{"64:ff9b:1:808:8:800::", true},     // local-use NAT64
		{"64:ff9b::a00:1", true},            // NAT64 of 10.0.0.1
		{"64:ff9b::ffff:ffff", true},        // NAT64 of broadcast
		{"64:ff9b::6440:1", true},           // NAT64 of CGNAT
		{"2001:db8:1::1", false},            // documentation, but no IPv4 inside
		{"2003::1", false},                  // just past 6to4
		{"2001:1::1", false},                // just past Teredo
		// Outside 2000::/3, where every global unicast address is.
		{"::1:0:0:0", true},
		{"::ffff:1:7f00:1", true},
		{"4000::1", true},
		{"e000::1", true},
		{"fec0::1", true}, // site-local
		{"100::1", true},  // discard-only
	}
	for _, tc := range tests {
		t.Run(tc.ip, func(t *testing.T) {
			ip := netip.MustParseAddr(tc.ip)
			assert.Equal(t, tc.forbidden, webhook.ForbiddenAddress(ip))
		})
	}
	assert.True(t, webhook.ForbiddenAddress(netip.Addr{}), "an invalid address fails closed")
}

// fakeResolver answers from a map instead of DNS.
type fakeResolver map[string][]string

func (f fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	addrs, ok := f[host]
	if !ok {
		return nil, errors.New("no such host")
	}
	out := make([]netip.Addr, len(addrs))
	for i, a := range addrs {
		out[i] = netip.MustParseAddr(a)
	}
	return out, nil
}

func TestCheckURL(t *testing.T) {
	t.Parallel()
	resolver := fakeResolver{
		"hooks.example.com":      {"93.184.216.34", "2606:2800:220:1::1"},
		"internal.example.com":   {"10.1.2.3"},
		"mixed.example.com":      {"93.184.216.34", "127.0.0.1"},
		"empty.example.com":      {},
		"translated.example.com": {"::ffff:0:7f00:1"},
		// What a resolver that reads numbers the way inet_aton does
		// (glibc's) answers; Go's own asks DNS.
		"2130706433": {"127.0.0.1"}, "0x7f000001": {"127.0.0.1"}, "0x7f.1": {"127.0.0.1"}, "127.1": {"127.0.0.1"},
		"017700000001": {"127.0.0.1"}, "0177.0.0.1": {"127.0.0.1"},
		// Public, as DNS might say of anything.
		"127.0.0.1.": {"93.184.216.34"}, "1.2.3.4.5": {"93.184.216.34"}, "hooks.example.123": {"93.184.216.34"},
		"123.example.com": {"93.184.216.34"}, "example.0xco": {"93.184.216.34"},
	}
	tests := []struct {
		name      string
		url       string
		forbidden bool
		invalid   bool
		fails     bool
	}{
		{name: "public host", url: "https://hooks.example.com/webhooks?x=1"},
		{name: "public IPv4 literal", url: "http://93.184.216.34:8080/"},
		{name: "public IPv6 literal", url: "http://[2606:4700:4700::1111]/"},
		{name: "private host", url: "https://internal.example.com/", forbidden: true},
		{name: "host with one private address", url: "https://mixed.example.com/", forbidden: true},
		{name: "loopback literal", url: "http://127.0.0.1:8080/", forbidden: true},
		{name: "metadata literal", url: "http://169.254.169.254/latest/meta-data", forbidden: true},
		{name: "IPv6 loopback literal", url: "http://[::1]/", forbidden: true},
		{name: "IPv4-mapped loopback literal", url: "http://[::ffff:127.0.0.1]/", forbidden: true},
		{name: "IPv4-translated loopback literal", url: "http://[::ffff:0:127.0.0.1]/", forbidden: true},
		{name: "IPv4-translated metadata literal", url: "http://[::ffff:0:a9fe:a9fe]/latest", forbidden: true},
		{name: "IPv4-translated public literal", url: "http://[::ffff:0:8.8.8.8]/", forbidden: true},
		{name: "IPv4-compatible loopback literal", url: "http://[::7f00:1]/", forbidden: true},
		{name: "NAT64 loopback literal", url: "http://[64:ff9b::127.0.0.1]/", forbidden: true},
		{name: "NAT64 public literal", url: "http://[64:ff9b::8.8.8.8]/"},
		{name: "local-use NAT64 literal", url: "http://[64:ff9b:1::7f00:1]/", forbidden: true},
		{name: "6to4 of loopback literal", url: "http://[2002:7f00:1::]/", forbidden: true},
		{name: "Teredo with loopback client literal", url: "http://[2001:0:808:808::80ff:fffe]/", forbidden: true},
		{name: "name resolving to IPv4-translated loopback", url: "https://translated.example.com/", forbidden: true},
		// Hosts that end in a number are IPv4 addresses to a browser and
		// to glibc's resolver, names to Go's: refused whatever the
		// resolver would make of them.
		{name: "decimal IPv4", url: "http://2130706433/", invalid: true},
		{name: "hex IPv4", url: "http://0x7f000001/", invalid: true},
		{name: "hex and short IPv4", url: "http://0x7f.1/", invalid: true},
		{name: "short IPv4", url: "http://127.1/", invalid: true},
		{name: "octal IPv4", url: "http://017700000001/", invalid: true},
		{name: "octal dotted IPv4", url: "http://0177.0.0.1/", invalid: true},
		{name: "IPv4 with a trailing dot", url: "http://127.0.0.1./", invalid: true},
		{name: "five numbers", url: "http://1.2.3.4.5/", invalid: true},
		{name: "numeric last label", url: "http://hooks.example.123/", invalid: true},
		{name: "numeric first label", url: "http://123.example.com/"},
		{name: "hex-looking last label", url: "http://example.0xco/"},
		{name: "zoned link-local literal", url: "http://[fe80::1%25eth0]/", forbidden: true},
		{name: "not http", url: "ftp://hooks.example.com/", invalid: true},
		{name: "no host", url: "https:///path", invalid: true},
		{name: "empty", url: "", invalid: true},
		{name: "unresolvable", url: "https://nowhere.example.com/", fails: true},
		{name: "no addresses", url: "https://empty.example.com/", fails: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := webhook.CheckURL(t.Context(), resolver, tc.url)
			var verr *domain.ValidationError
			switch {
			case tc.forbidden:
				assert.ErrorIs(t, err, domain.ErrForbiddenDestination)
			case tc.invalid:
				require.ErrorAs(t, err, &verr)
				assert.Equal(t, "url", verr.Field)
			case tc.fails:
				require.Error(t, err)
				assert.NotErrorIs(t, err, domain.ErrForbiddenDestination)
				assert.False(t, errors.As(err, &verr))
			default:
				assert.NoError(t, err)
			}
		})
	}
}

func TestCheckURLDefaultResolver(t *testing.T) {
	t.Parallel()
	// localhost resolves from /etc/hosts, without network access.
	err := webhook.CheckURL(t.Context(), nil, "http://localhost:8080/")
	assert.ErrorIs(t, err, domain.ErrForbiddenDestination)
}

// FuzzCheckURL feeds arbitrary URLs: CheckURL must not panic, and it must
// never accept a URL whose host is a forbidden IP literal.
func FuzzCheckURL(f *testing.F) {
	for _, seed := range []string{
		"https://hooks.example.com/x", "http://127.0.0.1/", "http://[::ffff:10.0.0.1]:80/",
		"http://[fe80::1%25en0]/", "http://0x7f.1/", "http://2130706433/", "https://user:pw@h/", "http://[::1",
	} {
		f.Add(seed)
	}
	resolver := fakeResolver{"hooks.example.com": {"93.184.216.34"}}
	f.Fuzz(func(t *testing.T, raw string) {
		err := webhook.CheckURL(context.Background(), resolver, raw)
		if err != nil {
			return
		}
		u, perr := url.Parse(raw)
		require.NoError(t, perr, "an accepted URL parses")
		if ip, perr := netip.ParseAddr(u.Hostname()); perr == nil {
			assert.False(t, webhook.ForbiddenAddress(ip), "accepted forbidden literal %s", ip)
		}
	})
}

func TestGuardAllowsPrivateTargetsOnlyWhenTold(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	if err := (webhook.Guard{}).CheckURL(ctx, "http://127.0.0.1:9/hook"); !errors.Is(err, domain.ErrForbiddenDestination) {
		t.Errorf("default guard on loopback = %v, want ErrForbiddenDestination", err)
	}
	if err := (webhook.Guard{Policy: webhook.Policy{AllowPrivate: true}}).CheckURL(ctx, "http://127.0.0.1:9/hook"); err != nil {
		t.Errorf("guard allowing private targets refused loopback: %v", err)
	}
}

func TestGuardAppliesTheAllowList(t *testing.T) {
	t.Parallel()
	resolver := fakeResolver{
		"hooks.internal": {"10.20.1.2"},
		"db.internal":    {"10.30.0.5"},
		"split.internal": {"10.20.1.2", "10.30.0.5"},
	}
	guard := webhook.Guard{
		Policy:   webhook.Policy{Allowed: []netip.Prefix{netip.MustParsePrefix("10.20.0.0/16"), netip.MustParsePrefix("127.0.0.1/32")}},
		Resolver: resolver,
	}
	tests := []struct {
		url     string
		refusal string // "" when accepted
	}{
		{url: "https://hooks.internal/x"},
		{url: "http://127.0.0.1:9/x"},
		{url: "http://[::ffff:127.0.0.1]:9/x"},
		{url: "http://10.20.255.255/x"},
		// A name's refusal does not tell what it resolved to.
		{url: "https://db.internal/x", refusal: "host resolves to a private, loopback or reserved address"},
		{url: "https://split.internal/x", refusal: "host resolves to a private, loopback or reserved address"},
		// A literal's names the kind of address the owner wrote.
		{url: "http://127.0.0.2/x", refusal: "host 127.0.0.2 is not an allowed destination (loopback)"},
		{url: "http://169.254.169.254/latest/meta-data", refusal: "host 169.254.169.254 is not an allowed destination (cloud metadata service)"},
		// The allow-list speaks of IPv4 destinations, not of IPv6 forms
		// that a translator would take there.
		{url: "http://[::ffff:0:127.0.0.1]:9/x", refusal: "host ::ffff:0:127.0.0.1 is not an allowed destination (IPv4-translated form of loopback)"},
		{url: "http://[64:ff9b::a14:102]/x", refusal: "host 64:ff9b::a14:102 is not an allowed destination (NAT64 form of private)"},
		{url: "http://[2002:7f00:1::1]/x", refusal: "host 2002:7f00:1::1 is not an allowed destination (6to4 form of loopback)"},
	}
	for _, tc := range tests {
		t.Run(tc.url, func(t *testing.T) {
			t.Parallel()
			err := guard.CheckURL(t.Context(), tc.url)
			if tc.refusal == "" {
				assert.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, domain.ErrForbiddenDestination)
			assert.EqualError(t, err, tc.refusal)
		})
	}
}

// referenceEmbeddedIPv4 is a plain restatement of the IPv6 forms that carry
// IPv4 addresses, read from the address's bytes: the IPv4 addresses a form
// carries, whether it is one at all, and whether it reaches a public IPv4
// address the guard lets through (IPv4-mapped and NAT64 only).
func referenceEmbeddedIPv4(a netip.Addr) (carried []netip.Addr, embedding, passesPublic bool) {
	b := a.As16()
	zero := func(bs []byte) bool { return bytes.Count(bs, []byte{0}) == len(bs) }
	low := netip.AddrFrom4([4]byte(b[12:]))
	switch {
	case zero(b[:10]) && b[10] == 0xff && b[11] == 0xff: // ::ffff:0:0/96, IPv4-mapped
		return []netip.Addr{low}, true, true
	case zero(b[:8]) && b[8] == 0xff && b[9] == 0xff && zero(b[10:12]): // ::ffff:0:0:0/96, IPv4-translated
		return []netip.Addr{low}, true, false
	case zero(b[:12]): // ::/96, IPv4-compatible
		return []netip.Addr{low}, true, false
	case bytes.Equal(b[:12], []byte{0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0}): // 64:ff9b::/96, NAT64
		return []netip.Addr{low}, true, true
	case bytes.Equal(b[:6], []byte{0, 0x64, 0xff, 0x9b, 0, 1}): // 64:ff9b:1::/48, local-use NAT64
		return nil, true, false
	case b[0] == 0x20 && b[1] == 0x02: // 2002::/16, 6to4
		return []netip.Addr{netip.AddrFrom4([4]byte(b[2:6]))}, true, false
	case b[0] == 0x20 && b[1] == 0x01 && b[2] == 0 && b[3] == 0: // 2001::/32, Teredo
		client := [4]byte{^b[12], ^b[13], ^b[14], ^b[15]}
		return []netip.Addr{netip.AddrFrom4([4]byte(b[4:8])), netip.AddrFrom4(client)}, true, false
	}
	return nil, false, false
}

// FuzzForbiddenAddress classifies arbitrary addresses, from text and from
// raw bytes: it must not panic, must refuse every embedding form that
// carries a refused IPv4 address, must treat IPv4-mapped and NAT64 forms
// exactly as the IPv4 address they carry, and must refuse the other forms
// whatever they carry. A URL with the address as its host gets the same
// answer from CheckURL.
func FuzzForbiddenAddress(f *testing.F) {
	for _, seed := range []string{
		"127.0.0.1", "8.8.8.8", "::ffff:127.0.0.1", "::ffff:0:127.0.0.1", "::ffff:0:8.8.8.8", "::127.0.0.1",
		"64:ff9b::8.8.8.8", "64:ff9b::10.0.0.1", "64:ff9b:1::1", "2002:7f00:1::1", "2002:808:808::1",
		"2001:0:4136:e378:8000:63bf:3fff:fdd2", "2606:4700:4700::1111", "fe80::1%eth0", "::", "0x7f.1",
	} {
		var raw []byte
		if a, err := netip.ParseAddr(seed); err == nil {
			raw = a.AsSlice()
		}
		f.Add(seed, raw)
	}
	f.Fuzz(func(t *testing.T, text string, raw []byte) {
		addrs := []netip.Addr{}
		if a, err := netip.ParseAddr(text); err == nil {
			addrs = append(addrs, a)
		}
		if a, ok := netip.AddrFromSlice(raw); ok {
			addrs = append(addrs, a)
		}
		for _, a := range addrs {
			forbidden := webhook.ForbiddenAddress(a)
			if a.Is6() && !a.Is4In6() && a.Zone() == "" {
				want := "http://[" + a.String() + "]/"
				if err := webhook.CheckURL(context.Background(), nil, want); (err != nil) != forbidden {
					t.Fatalf("CheckURL(%s) = %v, ForbiddenAddress = %t", want, err, forbidden)
				}
			}
			carried, embedding, passesPublic := referenceEmbeddedIPv4(a.WithZone(""))
			if !embedding {
				continue
			}
			anyForbidden := false
			for _, v4 := range carried {
				anyForbidden = anyForbidden || webhook.ForbiddenAddress(v4)
			}
			switch {
			case anyForbidden && !forbidden:
				t.Fatalf("%s carries a forbidden IPv4 address %v but is allowed", a, carried)
			case passesPublic && forbidden != anyForbidden:
				t.Fatalf("%s: forbidden %t, but the IPv4 address it carries, %v: %t", a, forbidden, carried, anyForbidden)
			case !passesPublic && !forbidden:
				t.Fatalf("%s is a deprecated or local embedding form but allowed", a)
			}
		}
	})
}
