package webhook_test

import (
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
		{"fec0::1", true},             // site-local
		{"100::1", true},              // discard-only
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
		"hooks.example.com":    {"93.184.216.34", "2606:2800:220:1::1"},
		"internal.example.com": {"10.1.2.3"},
		"mixed.example.com":    {"93.184.216.34", "127.0.0.1"},
		"empty.example.com":    {},
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
		{url: "https://db.internal/x", refusal: "url host db.internal: destination address is not allowed: 10.30.0.5 (private)"},
		{url: "https://split.internal/x", refusal: "url host split.internal: destination address is not allowed: 10.30.0.5 (private)"},
		{url: "http://127.0.0.2/x", refusal: "url host: destination address is not allowed: 127.0.0.2 (loopback)"},
		{url: "http://169.254.169.254/latest/meta-data", refusal: "url host: destination address is not allowed: 169.254.169.254 (cloud metadata service)"},
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
