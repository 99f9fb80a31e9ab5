package bootstrap_test

import (
	"context"
	"errors"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/fx"

	"github.com/dispatch-webhooks/dispatch/adapters/webhook"
	"github.com/dispatch-webhooks/dispatch/bootstrap"
	"github.com/dispatch-webhooks/dispatch/client"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// The SSRF guard end to end: subscription URLs checked at create/update
// (422), the delivery client's dialer checking again at connect time (DNS
// rebinding), and the allow-list of configuration. Unlike the rest of the
// suite these clusters run with private targets forbidden.

// TestSSRFGuardRefusesForbiddenURLsWith422 creates and updates
// subscriptions against an API whose guard is on, with the real resolver.
func TestSSRFGuardRefusesForbiddenURLsWith422(t *testing.T) {
	t.Parallel()
	c := newClusterWith(t, forbidPrivateTargets)

	// A literal's refusal names the kind of address the caller wrote; a
	// name's never tells what the name resolved to.
	for _, tc := range []struct{ url, says string }{
		{"http://169.254.169.254/latest/meta-data", "host 169.254.169.254 is not an allowed destination (cloud metadata service)"},
		{"http://127.0.0.1:9/hook", "host 127.0.0.1 is not an allowed destination (loopback)"},
		{"http://localhost:9/hook", "host resolves to a private, loopback or reserved address"}, // from /etc/hosts: 127.0.0.1 or ::1
		{"http://10.1.2.3/hook", "host 10.1.2.3 is not an allowed destination (private)"},
		{"http://[::ffff:0:127.0.0.1]:9/hook", "host ::ffff:0:127.0.0.1 is not an allowed destination (IPv4-translated form of loopback)"},
		{"http://127.1:9/hook", `host "127.1" ends in a number but is not an IP address in standard form`},
	} {
		res, err := c.api.CreateSubscriptionWithResponse(t.Context(), client.SubscriptionInput{Url: tc.url, EventTypes: &[]string{"*"}})
		status, msg := urlProblem(t, "create subscription at "+tc.url, res, err)
		if status != http.StatusUnprocessableEntity || !strings.Contains(msg, tc.says) {
			t.Errorf("create at %s = %d %s, want 422 on body.url saying %q", tc.url, status, res.GetBody(), tc.says)
		}
		if strings.HasPrefix(tc.url, "http://localhost") && (strings.Contains(msg, "127.0.0.1") || strings.Contains(msg, "::1")) {
			t.Errorf("create at %s = %q, which tells what localhost resolved to", tc.url, msg)
		}
	}

	// An update to a forbidden URL is refused too, and changes nothing.
	const public = "http://93.184.216.34/hook" // a literal: accepted without DNS
	id, _ := c.subscribe(public, "*", client.SubscriptionInput{})
	res, err := c.api.UpdateSubscriptionWithResponse(t.Context(), id, client.SubscriptionPatch{Url: new("http://169.254.169.254/")})
	status, msg := urlProblem(t, "update subscription "+id, res, err)
	if status != http.StatusUnprocessableEntity || !strings.Contains(msg, "host 169.254.169.254 is not an allowed destination (cloud metadata service)") {
		t.Errorf("update to the metadata address = %d %s, want 422 on body.url naming it", status, res.GetBody())
	}
	what := "get subscription " + id
	got, err := c.api.GetSubscriptionWithResponse(t.Context(), id)
	if sub := body(t, what, expect(t, what, got, err, http.StatusOK).JSON200); sub.Url != public {
		t.Errorf("after a refused update the url is %q, want %q unchanged", sub.Url, public)
	}
}

// TestDNSRebindingIsRefusedAtConnectTime gives the API a guard whose
// resolver says the receiver's host is public, as a rebinding DNS server
// would at creation time. At delivery the real resolver answers loopback:
// the dialer must refuse, and the delivery fail permanently after one
// attempt.
func TestDNSRebindingIsRefusedAtConnectTime(t *testing.T) {
	t.Parallel()
	rebinding := webhook.Guard{Resolver: staticResolver{"localhost": {netip.MustParseAddr("93.184.216.34")}}}
	c := newClusterWith(t, forbidPrivateTargets, fx.Decorate(func(ports.EndpointGuard) ports.EndpointGuard { return rebinding }))
	c.start(bootstrap.RoleWorker)
	c.start(bootstrap.RoleScheduler)
	rcv := newScripted(t)
	e, url := rcv.add("/rebound", nil)
	url = strings.Replace(url, "127.0.0.1", "localhost", 1)

	c.subscribe(url, "rebind.tested", client.SubscriptionInput{
		// Retries so fast that a retryable failure would show as more attempts.
		RetryPolicy: &client.RetryPolicy{InitialInterval: new("10ms"), Multiplier: new(1.0), MaxAttempts: new(int64(5))},
	})
	eventID := c.publish("rebind.tested", `{"n":1}`)

	ev := c.waitEvent(eventID, "failed", 15*time.Second)
	if len(ev.Deliveries) != 1 {
		t.Fatalf("event has %d deliveries, want 1", len(ev.Deliveries))
	}
	del := ev.Deliveries[0]
	if del.Status != "dead" || del.Attempts != 1 || del.LastStatusCode != nil {
		t.Errorf("delivery = status %s after %d attempts (last status code %d), want dead after exactly 1 attempt without an answer",
			del.Status, del.Attempts, deref(del.LastStatusCode))
	}
	attempts := c.attempts(eventID)
	if len(attempts) != 1 {
		t.Fatalf("event has %d attempts, want 1: %+v", len(attempts), attempts)
	}
	a := attempts[0]
	aErr := deref(a.Error)
	t.Logf("attempt error: %s", aErr)
	// localhost resolves to 127.0.0.1 here, and possibly to ::1 as well,
	// which the dialer may try first; either way the error, which the
	// subscription's owner reads, does not tell which.
	if a.StatusCode != nil || !strings.Contains(aErr, "destination address is not allowed: a private, loopback or reserved address") ||
		strings.Contains(aErr, "127.0.0.1") || strings.Contains(aErr, "::1") {
		t.Errorf("attempt %d = status code %d, error %q; want no status and an error saying the address is not allowed, without naming it",
			a.Attempt, deref(a.StatusCode), aErr)
	}
	if del.LastError == nil || *del.LastError != aErr {
		t.Errorf("delivery last_error = %q (set: %t), want the attempt's error %q", deref(del.LastError), del.LastError != nil, aErr)
	}
	if got := e.got(); len(got) != 0 {
		t.Errorf("the receiver got %d requests, want none: the dialer refuses before connecting", len(got))
	}
}

// TestAllowedTargetsLetALoopbackReceiverThrough forbids private targets but
// lists 127.0.0.0/8: a loopback receiver is accepted and gets its webhook,
// while other private addresses are still refused.
func TestAllowedTargetsLetALoopbackReceiverThrough(t *testing.T) {
	t.Parallel()
	c := newClusterWith(t, func(cfg *bootstrap.Config) {
		forbidPrivateTargets(cfg)
		cfg.AllowedTargets = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	})
	c.start(bootstrap.RoleWorker)
	c.start(bootstrap.RoleScheduler)
	rcv := newScripted(t)
	e, url := rcv.add("/allowed", nil)

	c.subscribe(url, "allow.tested", client.SubscriptionInput{})
	for _, refused := range []string{"http://10.0.0.1/hook", "http://169.254.169.254/"} {
		res, err := c.api.CreateSubscriptionWithResponse(t.Context(), client.SubscriptionInput{Url: refused, EventTypes: &[]string{"*"}})
		if status, _ := urlProblem(t, "create subscription at "+refused, res, err); status != http.StatusUnprocessableEntity {
			t.Errorf("create at %s (not listed) = %d %s, want 422", refused, status, res.GetBody())
		}
	}
	eventID := c.publish("allow.tested", `{"n":1}`)

	ev := c.waitEvent(eventID, "delivered", 15*time.Second)
	if len(ev.Deliveries) != 1 || ev.Deliveries[0].Attempts != 1 {
		t.Errorf("deliveries = %+v, want one delivered in 1 attempt", ev.Deliveries)
	}
	if got := e.got(); len(got) != 1 {
		t.Errorf("the loopback receiver got %d requests, want 1", len(got))
	}
}

// TestAllowedTargetsConfig parses the allow-list from the environment and
// from flags, and reports a bad entry by position and reason.
func TestAllowedTargetsConfig(t *testing.T) {
	parse := func(env string, args ...string) (bootstrap.Config, error) {
		return parseConfig(t, "DISPATCH_ALLOWED_TARGETS", env, args...)
	}

	cfg, err := parse(" 127.0.0.0/8, 10.20.0.0/16,fd00::1 ")
	if err != nil {
		t.Fatalf("valid list refused: %v", err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("10.20.0.0/16"), netip.MustParsePrefix("fd00::1/128")}
	if got := cfg.TargetPolicy(); got.AllowPrivate || !slices.Equal(got.Allowed, want) {
		t.Errorf("policy = %+v, want only the allow-list %v", got, want)
	}

	cfg, err = parse("127.0.0.0/8", "--allowed-targets", "192.168.0.0/24")
	if err != nil || !slices.Equal(cfg.AllowedTargets, []netip.Prefix{netip.MustParsePrefix("192.168.0.0/24")}) {
		t.Errorf("flag over env = %v, %v; want the flag's list", cfg.AllowedTargets, err)
	}

	for _, tc := range []struct{ env, want string }{
		{"127.0.0.0/8,10.20.1.0/16", `$DISPATCH_ALLOWED_TARGETS: entry 2 "10.20.1.0/16": has bits set past the /16 prefix; did you mean 10.20.0.0/16?`},
		{"10.0.0.0/33", `$DISPATCH_ALLOWED_TARGETS: entry 1 "10.0.0.0/33": not a CIDR range`},
		{"internal.example.com", `$DISPATCH_ALLOWED_TARGETS: entry 1 "internal.example.com": not an IP address or CIDR range`},
		{"127.0.0.0/8,", `$DISPATCH_ALLOWED_TARGETS: entry 2 "": empty`},
	} {
		if _, err := parse(tc.env); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("DISPATCH_ALLOWED_TARGETS=%q: error %v, want it to contain %q", tc.env, err, tc.want)
		}
	}
	_, err = parse("", "--allowed-targets", "10.0.0.0/8,not-an-ip")
	if err == nil || !strings.Contains(err.Error(), `entry 2 "not-an-ip"`) {
		t.Errorf("bad flag: error %v, want it to name entry 2", err)
	}

	// Set in code, the list is checked by Validate.
	cfg = bootstrap.DefaultConfig()
	cfg.AllowedTargets = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/8")}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "allowed-targets: entry 1 127.0.0.1/8: has bits set past the /8 prefix; did you mean 127.0.0.0/8?") {
		t.Errorf("Validate of a non-canonical range = %v", err)
	}

	// The SPEC's switch still allows everything.
	t.Setenv("DISPATCH_ALLOW_PRIVATE_TARGETS", "true")
	if cfg, err = parse(""); err != nil || !cfg.TargetPolicy().AllowPrivate || !cfg.TargetPolicy().Permits(netip.MustParseAddr("169.254.169.254")) {
		t.Errorf("DISPATCH_ALLOW_PRIVATE_TARGETS=true: policy %+v, %v; want every address permitted", cfg.TargetPolicy(), err)
	}
}

// staticResolver answers the guard's lookups from a map, like a DNS server
// that says whatever it is told to.
type staticResolver map[string][]netip.Addr

func (r staticResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if addrs, ok := r[host]; ok {
		return addrs, nil
	}
	return nil, errors.New("no such host: " + host)
}

// forbidPrivateTargets turns the guard on, which the rest of the suite's
// configuration turns off.
func forbidPrivateTargets(cfg *bootstrap.Config) { cfg.AllowPrivateTargets = false }

// problemResponse is a generated response that decodes a problem+json body.
type problemResponse interface {
	apiResponse
	GetApplicationproblemJSONDefault() *client.ErrorModel
}

// urlProblem returns the status of the call (what, for the message) and the
// message its problem body gives for body.url, "" when it gives none.
func urlProblem[R problemResponse](t testing.TB, what string, res R, err error) (status int, msg string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if p := res.GetApplicationproblemJSONDefault(); p != nil {
		for _, d := range deref(p.Errors) {
			if deref(d.Location) == "body.url" {
				return res.StatusCode(), deref(d.Message)
			}
		}
	}
	return res.StatusCode(), ""
}
