package webhook_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatch-webhooks/dispatch/adapters/webhook"
)

func prefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

func TestPolicyPermits(t *testing.T) {
	t.Parallel()
	strict := webhook.Policy{}
	everything := webhook.Policy{AllowPrivate: true}
	listed := webhook.Policy{Allowed: prefixes("127.0.0.0/8", "10.20.0.0/16", "fd00:1::/32", "169.254.169.254/32")}
	tests := []struct {
		name   string
		policy webhook.Policy
		addr   string
		want   bool
	}{
		{"strict: public", strict, "93.184.216.34", true},
		{"strict: public IPv6", strict, "2606:4700:4700::1111", true},
		{"strict: loopback", strict, "127.0.0.1", false},
		{"strict: private", strict, "10.20.0.1", false},
		{"strict: metadata", strict, "169.254.169.254", false},
		{"strict: CGNAT", strict, "100.64.0.1", false},

		{"allow private: loopback", everything, "127.0.0.1", true},
		{"allow private: metadata", everything, "169.254.169.254", true},
		{"allow private: IPv6 loopback", everything, "::1", true},

		{"listed: public stays permitted", listed, "8.8.8.8", true},
		{"listed: loopback range", listed, "127.0.0.1", true},
		{"listed: loopback range end", listed, "127.255.255.255", true},
		{"listed: IPv4-mapped loopback matches the IPv4 range", listed, "::ffff:127.0.0.1", true},
		{"listed: inside 10.20/16", listed, "10.20.255.254", true},
		{"listed: just outside 10.20/16", listed, "10.21.0.0", false},
		{"listed: other private", listed, "192.168.1.1", false},
		{"listed: IPv6 loopback is not in 127/8", listed, "::1", false},
		{"listed: unique local in range", listed, "fd00:1::5", true},
		{"listed: unique local out of range", listed, "fd00:2::5", false},
		{"listed: single metadata address", listed, "169.254.169.254", true},
		{"listed: rest of link-local", listed, "169.254.169.253", false},
		{"listed: NAT64 of a listed address is not listed", listed, "64:ff9b::7f00:1", false},
		{"listed: multicast", listed, "224.0.0.1", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tc.want, tc.policy.Permits(netip.MustParseAddr(tc.addr)))
		})
	}
	for _, p := range []webhook.Policy{strict, everything, listed, {Allowed: prefixes("0.0.0.0/0", "::/0")}} {
		assert.False(t, p.Permits(netip.Addr{}), "an invalid address fails closed under %+v", p)
	}
}

// TestPolicyPermitsAgreesWithForbiddenAddress checks that without
// exceptions, Permits is exactly the negation of ForbiddenAddress.
func TestPolicyPermitsAgreesWithForbiddenAddress(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		"93.184.216.34", "127.0.0.1", "10.0.0.1", "169.254.169.254", "100.64.0.1", "::1", "fe80::1%eth0",
		"::ffff:10.0.0.1", "64:ff9b::808:808", "64:ff9b::a9fe:a9fe", "2002:7f00:1::1", "240.0.0.1",
	} {
		a := netip.MustParseAddr(s)
		assert.Equal(t, !webhook.ForbiddenAddress(a), webhook.Policy{}.Permits(a), s)
	}
}

func TestParseAllowedTargets(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want []netip.Prefix
		err  string // "" when it parses
	}{
		{in: "", want: nil},
		{in: "  ", want: nil},
		{in: "127.0.0.0/8", want: prefixes("127.0.0.0/8")},
		{in: "127.0.0.0/8,10.20.0.0/16", want: prefixes("127.0.0.0/8", "10.20.0.0/16")},
		{in: " 127.0.0.0/8 , 10.20.0.0/16 ", want: prefixes("127.0.0.0/8", "10.20.0.0/16")},
		{in: "10.1.2.3", want: prefixes("10.1.2.3/32")},
		{in: "::1,fd00::/8", want: prefixes("::1/128", "fd00::/8")},
		{in: "0.0.0.0/0", want: prefixes("0.0.0.0/0")},

		{in: "10.20.1.0/16", err: `entry 1 "10.20.1.0/16": has bits set past the /16 prefix; did you mean 10.20.0.0/16?`},
		{in: "127.0.0.0/8,10.0.0.0/33", err: `entry 2 "10.0.0.0/33": not a CIDR range`},
		{in: "127.0.0.0/8,,10.0.0.0/8", err: `entry 2 "": empty`},
		{in: "127.0.0.0/8,", err: `entry 2 "": empty`},
		{in: "localhost", err: `entry 1 "localhost": not an IP address or CIDR range`},
		{in: "10.0.0.0/8;192.168.0.0/16", err: `entry 1 "10.0.0.0/8;192.168.0.0/16": not a CIDR range`},
		{in: "10.0.0.0-10.0.0.255", err: `entry 1 "10.0.0.0-10.0.0.255": not an IP address or CIDR range`},
		{in: "fe80::1%eth0", err: `entry 1 "fe80::1%eth0": has an IPv6 zone; write the address without %eth0`},
		{in: "fe80::%eth0/64", err: `entry 1 "fe80::%eth0/64": not a CIDR range`},
		{in: "::ffff:127.0.0.1", err: `entry 1 "::ffff:127.0.0.1": IPv4-mapped IPv6 form never matches; write it in IPv4 form`},
		{in: "::ffff:10.0.0.0/104", err: `entry 1 "::ffff:10.0.0.0/104": IPv4-mapped IPv6 form never matches`},
		{in: "127.1/8", err: `entry 1 "127.1/8": not a CIDR range`},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			got, err := webhook.ParseAllowedTargets(tc.in)
			if tc.err != "" {
				require.Error(t, err)
				assert.True(t, strings.HasPrefix(err.Error(), tc.err), "error %q does not start with %q", err, tc.err)
				assert.Nil(t, got)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestPolicyValidate(t *testing.T) {
	t.Parallel()
	assert.NoError(t, webhook.Policy{}.Validate())
	assert.NoError(t, webhook.Policy{Allowed: prefixes("127.0.0.0/8", "::1/128")}.Validate())
	err := webhook.Policy{Allowed: []netip.Prefix{
		netip.MustParsePrefix("127.0.0.0/8"), {}, netip.MustParsePrefix("10.1.0.0/8"),
	}}.Validate()
	assert.ErrorContains(t, err, "entry 2 invalid Prefix: not a valid CIDR range")
	assert.ErrorContains(t, err, "entry 3 10.1.0.0/8: has bits set past the /8 prefix; did you mean 10.0.0.0/8?")
}

// FuzzParseAllowedTargets feeds arbitrary configuration strings: parsing
// must not panic, and whatever it accepts must pass Policy.Validate and
// permit the addresses of the ranges it lists.
func FuzzParseAllowedTargets(f *testing.F) {
	for _, seed := range []string{
		"127.0.0.0/8,10.20.0.0/16", "::1", "fe80::1%eth0", "10.20.1.0/16", ",", " , ", "::ffff:1.2.3.4/128", "1.2.3.4/-1",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := webhook.ParseAllowedTargets(s)
		if err != nil {
			return
		}
		policy := webhook.Policy{Allowed: got}
		require.NoError(t, policy.Validate())
		for _, p := range got {
			a := p.Addr()
			assert.True(t, policy.Permits(a), "%s not permitted although %s is listed", a, p)
		}
	})
}
