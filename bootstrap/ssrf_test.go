package bootstrap_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/fx"

	"github.com/dispatch-webhooks/dispatch/adapters/postgres/pgtest"
	"github.com/dispatch-webhooks/dispatch/adapters/redis/redistest"
	"github.com/dispatch-webhooks/dispatch/adapters/webhook"
	"github.com/dispatch-webhooks/dispatch/bootstrap"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// The SSRF guard end to end: subscription URLs checked at create/update
// (422), the delivery client's dialer checking again at connect time (DNS
// rebinding), and the allow-list of configuration. Unlike the rest of the
// suite these deployments run with private targets forbidden.

// TestSSRFGuardRefusesForbiddenURLsWith422 creates and updates
// subscriptions against an API whose guard is on, with the real resolver.
func TestSSRFGuardRefusesForbiddenURLsWith422(t *testing.T) {
	t.Parallel()
	d := newSSRFDeployment(t, nil)

	for _, tc := range []struct{ url, names string }{
		{"http://169.254.169.254/latest/meta-data", "169.254.169.254 (cloud metadata service)"},
		{"http://127.0.0.1:9/hook", "127.0.0.1 (loopback)"},
		{"http://localhost:9/hook", "(loopback)"}, // resolved from /etc/hosts: 127.0.0.1 or ::1
		{"http://10.1.2.3/hook", "10.1.2.3 (private)"},
	} {
		status, body := d.api.do(http.MethodPost, "/v1/subscriptions", map[string]any{"url": tc.url, "event_types": []string{"*"}}, nil)
		if status != http.StatusUnprocessableEntity || !strings.Contains(body, "body.url") ||
			!strings.Contains(body, "destination address is not allowed") || !strings.Contains(body, tc.names) {
			t.Errorf("create at %s = %d %s, want 422 on body.url saying the destination address %s is not allowed", tc.url, status, body, tc.names)
		}
	}

	// An update to a forbidden URL is refused too, and changes nothing.
	var sub struct {
		ID  string `json:"id"`
		URL string `json:"url"`
	}
	const public = "http://93.184.216.34/hook" // a literal: accepted without DNS
	d.api.must(http.MethodPost, "/v1/subscriptions", map[string]any{"url": public, "event_types": []string{"*"}}, http.StatusCreated, &sub)
	status, body := d.api.do(http.MethodPatch, "/v1/subscriptions/"+sub.ID, map[string]any{"url": "http://169.254.169.254/"}, nil)
	if status != http.StatusUnprocessableEntity || !strings.Contains(body, "169.254.169.254 (cloud metadata service)") {
		t.Errorf("update to the metadata address = %d %s, want 422 naming it", status, body)
	}
	d.api.must(http.MethodGet, "/v1/subscriptions/"+sub.ID, nil, http.StatusOK, &sub)
	if sub.URL != public {
		t.Errorf("after a refused update the url is %q, want %q unchanged", sub.URL, public)
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
	d := newSSRFDeployment(t, nil, fx.Decorate(func(ports.EndpointGuard) ports.EndpointGuard { return rebinding }))
	rcv := newScripted(t)
	e, url := rcv.add("/rebound", nil)
	url = strings.Replace(url, "127.0.0.1", "localhost", 1)

	var sub struct{ ID string }
	d.api.must(http.MethodPost, "/v1/subscriptions", map[string]any{
		"url": url, "event_types": []string{"rebind.tested"},
		// Retries so fast that a retryable failure would show as more attempts.
		"retry_policy": map[string]any{"initial_interval": "10ms", "multiplier": 1, "max_attempts": 5},
	}, http.StatusCreated, &sub)
	eventID := d.publish("rebind.tested")

	ev := d.waitEvent(eventID, "failed")
	if len(ev.Deliveries) != 1 {
		t.Fatalf("event has %d deliveries, want 1", len(ev.Deliveries))
	}
	del := ev.Deliveries[0]
	if del.Status != "dead" || del.Attempts != 1 || del.LastStatusCode != nil {
		t.Errorf("delivery = status %s after %d attempts (last status code %v), want dead after exactly 1 attempt without an answer",
			del.Status, del.Attempts, del.LastStatusCode)
	}
	var attempts struct {
		Data []struct {
			Attempt    int    `json:"attempt"`
			StatusCode *int   `json:"status_code"`
			Error      string `json:"error"`
		} `json:"data"`
	}
	d.api.must(http.MethodGet, "/v1/events/"+eventID+"/attempts", nil, http.StatusOK, &attempts)
	if len(attempts.Data) != 1 {
		t.Fatalf("event has %d attempts, want 1: %+v", len(attempts.Data), attempts.Data)
	}
	a := attempts.Data[0]
	t.Logf("attempt error: %s", a.Error)
	// localhost resolves to 127.0.0.1 here, and possibly to ::1 as well,
	// which the dialer may try first; either way the address is named.
	if a.StatusCode != nil || !strings.Contains(a.Error, "destination address is not allowed: ") ||
		!(strings.Contains(a.Error, "127.0.0.1 (loopback)") || strings.Contains(a.Error, "::1 (loopback)")) {
		t.Errorf("attempt = %+v, want no status and an error saying the loopback address is not allowed", a)
	}
	if del.LastError == nil || *del.LastError != a.Error {
		t.Errorf("delivery last_error = %v, want the attempt's error %q", del.LastError, a.Error)
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
	d := newSSRFDeployment(t, func(cfg *bootstrap.Config) {
		cfg.AllowedTargets = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	})
	rcv := newScripted(t)
	e, url := rcv.add("/allowed", nil)

	d.api.must(http.MethodPost, "/v1/subscriptions", map[string]any{"url": url, "event_types": []string{"allow.tested"}}, http.StatusCreated, nil)
	for _, refused := range []string{"http://10.0.0.1/hook", "http://169.254.169.254/"} {
		if status, body := d.api.do(http.MethodPost, "/v1/subscriptions", map[string]any{"url": refused, "event_types": []string{"*"}}, nil); status != http.StatusUnprocessableEntity {
			t.Errorf("create at %s (not listed) = %d %s, want 422", refused, status, body)
		}
	}
	eventID := d.publish("allow.tested")

	ev := d.waitEvent(eventID, "delivered")
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
		t.Setenv("DISPATCH_ALLOWED_TARGETS", env)
		cfg := bootstrap.DefaultConfig()
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		cfg.Flags(fs)
		if err := fs.Parse(args); err != nil {
			return cfg, err
		}
		return cfg, cfg.Validate()
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

// ssrfKey is the API key of these deployments.
const ssrfKey = "ssrf-test-key"

// ssrfDeployment is api, worker and scheduler on real PostgreSQL and Redis
// with private targets forbidden. apiOptions are added to the api's app,
// where subscriptions are created (the guard lives there).
type ssrfDeployment struct {
	t   *testing.T
	api ssrfAPI
}

func newSSRFDeployment(t *testing.T, tune func(*bootstrap.Config), apiOptions ...fx.Option) *ssrfDeployment {
	t.Helper()
	cfg := bootstrap.DefaultConfig()
	cfg.ListenAddr = "127.0.0.1:0"
	cfg.APIKeys = []string{ssrfKey}
	cfg.AllowPrivateTargets = false
	cfg.SchedulerPollInterval = 50 * time.Millisecond
	cfg.VisibilityTimeout = time.Second
	cfg.LogLevel = "error"
	cfg.DatabaseURL = pgtest.NewDatabase(t)
	cfg.RedisURL = redistest.URL()
	cfg.RedisKeyPrefix = redistest.Prefix(t)
	if tune != nil {
		tune(&cfg)
	}
	startApp(t, bootstrap.RoleMigrate, cfg)
	var api *bootstrap.APIServer
	startApp(t, bootstrap.RoleAPI, cfg, append(apiOptions, fx.Populate(&api))...)
	startApp(t, bootstrap.RoleWorker, cfg)
	startApp(t, bootstrap.RoleScheduler, cfg)
	return &ssrfDeployment{t: t, api: ssrfAPI{t: t, base: "http://" + api.Addr()}}
}

func (d *ssrfDeployment) publish(eventType string) string {
	d.t.Helper()
	var ev struct{ ID string }
	d.api.must(http.MethodPost, "/v1/events", map[string]any{
		"type": eventType, "source": "ssrf-test", "data": map[string]any{"n": 1},
	}, http.StatusAccepted, &ev)
	return ev.ID
}

type ssrfEvent struct {
	Status     string `json:"status"`
	Deliveries []struct {
		Status         string  `json:"status"`
		Attempts       int     `json:"attempts"`
		LastStatusCode *int    `json:"last_status_code"`
		LastError      *string `json:"last_error"`
	} `json:"deliveries"`
}

// waitEvent polls the event until its status is want.
func (d *ssrfDeployment) waitEvent(id, want string) ssrfEvent {
	d.t.Helper()
	var ev ssrfEvent
	waitFor(d.t, 15*time.Second, "event "+id+" to be "+want, func() bool {
		d.api.must(http.MethodGet, "/v1/events/"+id, nil, http.StatusOK, &ev)
		return ev.Status == want
	})
	return ev
}

// ssrfAPI calls the HTTP API with plain net/http.
type ssrfAPI struct {
	t    *testing.T
	base string
}

// do sends body as JSON and returns the status and the answer, decoding a
// 2xx answer into out when it is not nil.
func (a ssrfAPI) do(method, path string, body, out any) (int, string) {
	a.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			a.t.Fatalf("encode %s %s: %v", method, path, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(a.t.Context(), method, a.base+path, rd)
	if err != nil {
		a.t.Fatalf("%s %s: %v", method, path, err)
	}
	req.Header.Set("Authorization", "Bearer "+ssrfKey)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	if out != nil && res.StatusCode/100 == 2 {
		if err := json.Unmarshal(raw, out); err != nil {
			a.t.Fatalf("%s %s: decode %s: %v", method, path, raw, err)
		}
	}
	return res.StatusCode, string(raw)
}

// must is do, failing the test unless the status is want.
func (a ssrfAPI) must(method, path string, body any, want int, out any) {
	a.t.Helper()
	if status, raw := a.do(method, path, body, out); status != want {
		a.t.Fatalf("%s %s = %d, want %d: %s", method, path, status, want, raw)
	}
}
