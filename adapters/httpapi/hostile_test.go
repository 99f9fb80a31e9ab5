package httpapi_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/dispatch-webhooks/dispatch/adapters/httpapi"
	"github.com/dispatch-webhooks/dispatch/adapters/memory"
	"github.com/dispatch-webhooks/dispatch/adapters/webhook"
	"github.com/dispatch-webhooks/dispatch/application"
	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// hostileDNS is a DNS server an attacker can point names at: it answers
// every name with a public address unless listed, including names that
// are numbers, which glibc's resolver would read as IPv4 addresses.
type hostileDNS map[string]string

// resolverServer is the DNS server a lookup failure names; no answer may
// show it.
const resolverServer = "10.255.255.53:53"

func (d hostileDNS) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	switch a, ok := d[host]; {
	case !ok:
		return []netip.Addr{netip.MustParseAddr("93.184.216.34")}, nil
	case a == "":
		return nil, &net.DNSError{Err: "no such host", Name: host, Server: resolverServer, IsNotFound: true}
	default:
		return []netip.Addr{netip.MustParseAddr(a)}, nil
	}
}

// newHostileServer is the API on a memory store with the SSRF guard on
// (DISPATCH_ALLOW_PRIVATE_TARGETS off) and hostileDNS as its resolver.
func newHostileServer(t *testing.T) *server {
	t.Helper()
	store := memory.NewStore()
	clock := ports.SystemClock{}
	dns := hostileDNS{
		"localhost":          "127.0.0.1",
		"internal.example":   "10.1.2.3",
		"metadata.example":   "169.254.169.254",
		"translated.example": "::ffff:0:7f00:1",
		"nowhere.example":    "",
	}
	mux := http.NewServeMux()
	httpapi.New(mux, httpapi.Config{Version: "test", APIKeys: []string{key}, MaxEventBytes: 4096},
		httpapi.UseCases{
			Ingest:        &application.Ingest{Events: store, Queue: nopQueue{}, Clock: clock, MaxInlineDeliveries: -1},
			Subscriptions: &application.Subscriptions{Store: store, Clock: clock, Guard: webhook.Guard{Resolver: dns}},
			Events:        &application.Events{Events: store, Deliveries: store},
			Deliveries:    &application.Deliveries{Deliveries: store, Subscriptions: store, Queue: nopQueue{}, Clock: clock},
		}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &server{Server: srv, store: store}
}

// state is everything a request could change: the subscriptions as stored
// and the events waiting in the outbox.
func (s *server) state(t *testing.T) ([]domain.Subscription, []string) {
	t.Helper()
	subs, err := s.store.ListSubscriptions(context.Background(), ports.Page{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	events, err := s.store.UnfannedEvents(context.Background(), farFuture, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	return subs, events
}

// TestHostileInputsAreRefusedAndChangeNothing sends what a careless or
// malicious caller might through the real API, with the SSRF guard on:
// each is answered with a 4xx problem (a 422 naming the field where one is
// at fault), the stored subscriptions and events stay exactly as they
// were, and no answer tells what a name resolved to or which DNS server
// was asked.
func TestHostileInputsAreRefusedAndChangeNothing(t *testing.T) {
	t.Parallel()
	s := newHostileServer(t)
	res, sub := s.do(t, "POST", "/v1/subscriptions", `{"url":"https://hooks.example.com/h","event_types":["order.*"],"headers":{"X-Tenant":"acme"}}`)
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("create the subscription the PATCHes aim at = %d %v", res.StatusCode, sub)
	}
	subPath := "/v1/subscriptions/" + sub["id"].(string)
	if res, ev := s.do(t, "POST", "/v1/events", `{"type":"order.created","source":"s","data":{}}`); res.StatusCode != http.StatusAccepted {
		t.Fatalf("publish = %d %v", res.StatusCode, ev)
	}

	create := func(extra string) string {
		return `{"url":"https://hooks.example.com/h","event_types":["a"]` + extra + `}`
	}
	at := func(url string) string { return `{"url":` + quote(url) + `,"event_types":["a"]}` }
	headers := func(h string) string { return create(`,"headers":` + h) }
	manyHeaders := func(n int) string {
		var parts []string
		for i := range n {
			parts = append(parts, fmt.Sprintf(`"X-H%d":"v"`, i))
		}
		return "{" + strings.Join(parts, ",") + "}"
	}
	type hostile struct {
		name, method, path, body string
		header                   []string
		status                   int
		location                 string // the problem's error location, for a 422 ("" to skip)
	}
	post := func(name, body string, status int, location string) hostile {
		return hostile{name: name, method: "POST", path: "/v1/subscriptions", body: body, status: status, location: location}
	}
	patch := func(name, body string, location string) hostile {
		return hostile{name: "PATCH " + name, method: "PATCH", path: subPath, body: body, status: 422, location: location}
	}
	publish := func(name, body string, status int) hostile {
		return hostile{name: "publish " + name, method: "POST", path: "/v1/events", body: body, status: status}
	}
	get := func(name, path string, status int) hostile {
		return hostile{name: name, method: "GET", path: path, status: status}
	}
	tests := []hostile{
		// Bodies that are not what the route takes.
		post("malformed JSON", `{"url":`, 400, ""),
		post("trailing garbage", create(``)+`}`, 400, ""),
		post("array body", `[`+create(``)+`]`, 422, ""),
		post("null body", `null`, 422, ""),
		post("unknown field", create(`,"colour":"red"`), 422, "body.colour"),
		post("unknown retry policy field", create(`,"retry_policy":{"strategy":"exponential","linear":true}`), 422, "body.retry_policy.linear"),
		{name: "wrong content type", method: "POST", path: "/v1/subscriptions", body: create(``), header: []string{"Content-Type", "text/plain"}, status: 415},

		// Wrong types and values out of range.
		post("event_types a string", `{"url":"https://hooks.example.com/h","event_types":"a"}`, 422, "body.event_types"),
		post("rate_limit a string", create(`,"rate_limit":"5"`), 422, "body.rate_limit"),
		post("rate_limit fractional", create(`,"rate_limit":1.5`), 422, "body.rate_limit"),
		post("rate_limit huge", create(`,"rate_limit":1e20`), 422, "body.rate_limit"),
		post("rate_limit negative", create(`,"rate_limit":-5`), 422, "body.rate_limit"),
		post("rate_limit above 10000", create(`,"rate_limit":10001`), 422, "body.rate_limit"),
		post("max_in_flight negative", create(`,"max_in_flight":-1`), 422, "body.max_in_flight"),
		post("max_in_flight above 1000", create(`,"max_in_flight":1001`), 422, "body.max_in_flight"),
		post("timeout not a duration", create(`,"timeout":"soon"`), 422, "body.timeout"),
		post("timeout in days", create(`,"timeout":"1d"`), 422, "body.timeout"),
		post("timeout negative", create(`,"timeout":"-1s"`), 422, "body.timeout"),
		post("timeout zero", create(`,"timeout":"0s"`), 422, ""), // refused while decoding: huma says "body"
		post("timeout above 60s", create(`,"timeout":"61s"`), 422, "body.timeout"),
		post("timeout a number", create(`,"timeout":10`), 422, "body.timeout"),
		post("description too long", create(`,"description":"`+strings.Repeat("d", 1025)+`"`), 422, "body.description"),
		post("secret not whsec_", create(`,"secret":"hunter2"`), 422, "body.secret"),
		post("secret empty key", create(`,"secret":"whsec_"`), 422, "body.secret"),

		// Retry policies.
		post("unknown strategy", create(`,"retry_policy":{"strategy":"linear"}`), 422, "body.retry_policy.strategy"),
		post("jitter above 1", create(`,"retry_policy":{"jitter":2}`), 422, "body.retry_policy.jitter"),
		post("multiplier below 1", create(`,"retry_policy":{"multiplier":0.5}`), 422, "body.retry_policy.multiplier"),
		post("max_attempts 1000", create(`,"retry_policy":{"max_attempts":1000}`), 422, "body.retry_policy.max_attempts"),
		post("schedule with a bad delay", create(`,"retry_policy":{"strategy":"schedule","schedule":["1m","soon"]}`), 422, "body.retry_policy.schedule[1]"),
		post("schedule strategy without a schedule", create(`,"retry_policy":{"strategy":"schedule"}`), 422, ""),

		// Event types and JSON pointers.
		post("no event types", `{"url":"https://hooks.example.com/h","event_types":[]}`, 422, "body.event_types"),
		post("bad pattern", `{"url":"https://hooks.example.com/h","event_types":["a*"]}`, 422, "body.event_types[0]"),
		post("empty event type", `{"url":"https://hooks.example.com/h","event_types":["a",""]}`, 422, "body.event_types[1]"),
		post("event type a number", `{"url":"https://hooks.example.com/h","event_types":[1]}`, 422, "body.event_types[0]"),
		post("101 event types", `{"url":"https://hooks.example.com/h","event_types":[`+strings.TrimSuffix(strings.Repeat(`"a",`, 101), ",")+`]}`, 422, "body.event_types"),
		post("pointer without slash", create(`,"ordering_key":"data/x"`), 422, "body.ordering_key"),
		post("pointer outside the event", create(`,"ordering_key":"/customer_id"`), 422, "body.ordering_key"),
		post("pointer with a bad escape", create(`,"ordering_key":"/data/~2"`), 422, "body.ordering_key"),
		post("pointer too long", create(`,"ordering_key":"/data/`+strings.Repeat("k", 300)+`"`), 422, "body.ordering_key"),

		// URLs that are not endpoints.
		post("ftp URL", at("ftp://hooks.example.com/x"), 422, "body.url"),
		post("javascript URL", at("javascript:alert(1)"), 422, "body.url"),
		post("relative URL", at("/hook"), 422, "body.url"),
		post("empty URL", at(""), 422, "body.url"),
		post("URL with credentials", at("https://user:pw@hooks.example.com/h"), 422, "body.url"),
		post("URL with a fragment", at("https://hooks.example.com/h#x"), 422, "body.url"),
		post("malformed IPv6 URL", at("http://[::1"), 422, "body.url"),
		post("URL too long", at("https://hooks.example.com/"+strings.Repeat("a", 2100)), 422, "body.url"),

		// SSRF: addresses the guard refuses, however they are spelled.
		post("loopback", at("http://127.0.0.1:9/h"), 422, "body.url"),
		post("metadata", at("http://169.254.169.254/latest/meta-data"), 422, "body.url"),
		post("IPv6 loopback", at("http://[::1]/h"), 422, "body.url"),
		post("IPv4-mapped loopback", at("http://[::ffff:127.0.0.1]/h"), 422, "body.url"),
		post("IPv4-translated loopback", at("http://[::ffff:0:127.0.0.1]/h"), 422, "body.url"),
		post("IPv4-translated metadata", at("http://[::ffff:0:a9fe:a9fe]/h"), 422, "body.url"),
		post("IPv4-compatible loopback", at("http://[::127.0.0.1]/h"), 422, "body.url"),
		post("NAT64 of a private address", at("http://[64:ff9b::10.0.0.1]/h"), 422, "body.url"),
		post("local-use NAT64", at("http://[64:ff9b:1::a00:1]/h"), 422, "body.url"),
		post("6to4 of loopback", at("http://[2002:7f00:1::1]/h"), 422, "body.url"),
		post("Teredo", at("http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/h"), 422, "body.url"),
		post("zoned link-local", at("http://[fe80::1%25eth0]/h"), 422, "body.url"),
		post("AWS IPv6 metadata", at("http://[fd00:ec2::254]/h"), 422, "body.url"),
		post("decimal IPv4", at("http://2130706433/h"), 422, "body.url"),
		post("hex IPv4", at("http://0x7f000001/h"), 422, "body.url"),
		post("hex short IPv4", at("http://0x7f.1/h"), 422, "body.url"),
		post("short IPv4", at("http://127.1/h"), 422, "body.url"),
		post("octal IPv4", at("http://017700000001/h"), 422, "body.url"),
		post("IPv4 with a trailing dot", at("http://127.0.0.1./h"), 422, "body.url"),
		post("name resolving to loopback", at("http://localhost:9/h"), 422, "body.url"),
		post("name resolving to a private address", at("https://internal.example/h"), 422, "body.url"),
		post("name resolving to metadata", at("https://metadata.example/h"), 422, "body.url"),
		post("name resolving to IPv4-translated loopback", at("https://translated.example/h"), 422, "body.url"),
		post("name that does not resolve", at("https://nowhere.example/h"), 422, "body.url"),

		// Custom headers.
		post("header Upgrade", headers(`{"Upgrade":"h2c"}`), 422, "body.headers.Upgrade"),
		post("header TE", headers(`{"TE":"trailers"}`), 422, "body.headers.TE"),
		post("header Connection", headers(`{"Connection":"close"}`), 422, "body.headers.Connection"),
		post("header Keep-Alive", headers(`{"Keep-Alive":"timeout=5"}`), 422, "body.headers.Keep-Alive"),
		post("header Trailer", headers(`{"Trailer":"X-A"}`), 422, "body.headers.Trailer"),
		post("header Transfer-Encoding", headers(`{"Transfer-Encoding":"chunked"}`), 422, "body.headers.Transfer-Encoding"),
		post("header Proxy-Authorization", headers(`{"Proxy-Authorization":"Basic eDp5"}`), 422, "body.headers.Proxy-Authorization"),
		post("header Proxy-Connection", headers(`{"proxy-connection":"keep-alive"}`), 422, "body.headers.proxy-connection"),
		post("header reserved", headers(`{"webhook-signature":"v1,x"}`), 422, "body.headers.webhook-signature"),
		post("header Host", headers(`{"Host":"internal"}`), 422, "body.headers.Host"),
		post("header value with VT", headers(`{"X-A":"a\u000bb"}`), 422, "body.headers.X-A"),
		post("header value with DEL", headers(`{"X-A":"a\u007fb"}`), 422, "body.headers.X-A"),
		post("header value with CRLF", headers(`{"X-A":"a\r\nX-B: b"}`), 422, "body.headers.X-A"),
		post("header value with a leading space", headers(`{"X-A":" a"}`), 422, "body.headers.X-A"),
		post("header value of 900 KB", headers(`{"X-A":"`+strings.Repeat("v", 900_000)+`"}`), 422, "body.headers"),
		post("21 headers", headers(manyHeaders(21)), 422, "body.headers"),
		post("header name with a space", headers(`{"X Bad":"v"}`), 422, "body.headers"),
		post("header name twice", headers(`{"X-A":"1","x-a":"2"}`), 422, "body.headers.x-a"),
		post("header value a number", headers(`{"X-A":1}`), 422, "body.headers.X-A"),
		post("headers an array", headers(`["X-A: 1"]`), 422, "body.headers"),

		// A partial update is checked the same way and changes nothing.
		patch("to a private URL", `{"url":"https://internal.example/h"}`, "body.url"),
		patch("to an IPv4-translated URL", `{"url":"http://[::ffff:0:127.0.0.1]/h"}`, "body.url"),
		patch("to a short IPv4 URL", `{"url":"http://127.1/h"}`, "body.url"),
		patch("with a hop-by-hop header", `{"headers":{"Upgrade":"websocket"}}`, "body.headers.Upgrade"),
		patch("with a control character", `{"headers":{"X-A":"\u0001"}}`, "body.headers.X-A"),
		patch("with an unknown field", `{"colour":"red"}`, "body.colour"),
		patch("with a bad rate limit", `{"rate_limit":0}`, "body.rate_limit"),
		patch("with a bad retry policy", `{"retry_policy":{"max_attempts":0,"strategy":"backoff"}}`, ""),

		// Events.
		publish("malformed JSON", `{"type":`, 400),
		publish("array data", `{"type":"a","source":"s","data":[1]}`, 422),
		publish("string data", `{"type":"a","source":"s","data":"x"}`, 422),
		publish("null data", `{"type":"a","source":"s","data":null}`, 422),
		publish("missing type", `{"source":"s","data":{}}`, 422),
		publish("type a number", `{"type":1,"source":"s","data":{}}`, 422),
		publish("bad type", `{"type":"a..b","source":"s","data":{}}`, 422),
		publish("wildcard type", `{"type":"order.*","source":"s","data":{}}`, 422),
		publish("type too long", `{"type":"`+strings.Repeat("t", 129)+`","source":"s","data":{}}`, 422),
		publish("unknown field", `{"type":"a","source":"s","data":{},"extra":1}`, 422),
		publish("over the size limit", `{"type":"a","source":"s","data":{"x":"`+strings.Repeat("x", 5000)+`"}}`, 413),
		{name: "publish as text/plain", method: "POST", path: "/v1/events", body: `{"type":"a","source":"s","data":{}}`, header: []string{"Content-Type", "text/plain"}, status: 415},

		// Lists.
		get("subscriptions limit 0", "/v1/subscriptions?limit=0", 422),
		get("subscriptions limit negative", "/v1/subscriptions?limit=-1", 422),
		get("subscriptions limit not a number", "/v1/subscriptions?limit=abc", 422),
		get("subscriptions limit too large", "/v1/subscriptions?limit=100000", 422),
		get("subscriptions bad cursor", "/v1/subscriptions?cursor=not-a-cursor", 400),
		get("subscriptions cursor too long", "/v1/subscriptions?cursor="+strings.Repeat("c", 200), 422),
		get("deliveries bad status", "/v1/deliveries?status=lost", 422),
		get("deliveries bad limit", "/v1/deliveries?limit=abc", 422),
		get("deliveries bad cursor", "/v1/deliveries?cursor=bm90LWEtY3Vyc29y", 400),
		get("deliveries cursor not text", "/v1/deliveries?cursor=%00%ff", 422),
	}
	if len(tests) < 40 {
		t.Fatalf("only %d hostile inputs", len(tests))
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			beforeSubs, beforeEvents := s.state(t)
			raw, res := s.doRaw(t, tt.method, tt.path, tt.body, tt.header...)
			if res.StatusCode != tt.status {
				t.Errorf("status = %d, want %d: %s", res.StatusCode, tt.status, raw)
			}
			if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
				t.Errorf("content type = %q, want application/problem+json", ct)
			}
			if tt.location != "" && !strings.Contains(raw, `"location":"`+tt.location+`"`) {
				t.Errorf("problem = %s, want an error at %s", raw, tt.location)
			}
			for _, secret := range []string{"10.1.2.3", "169.254.169.254", "7f00:1", resolverServer, "10.255.255.53"} {
				if !strings.Contains(tt.body, secret) && !strings.Contains(tt.path, secret) && strings.Contains(raw, secret) {
					t.Errorf("the answer tells %s, which the request did not: %s", secret, raw)
				}
			}
			if len(raw) > 4096 {
				t.Errorf("the answer is %d bytes long: %.200s…", len(raw), raw)
			}
			subs, events := s.state(t)
			if !reflect.DeepEqual(subs, beforeSubs) || !reflect.DeepEqual(events, beforeEvents) {
				t.Errorf("state changed:\nsubscriptions %+v\nwere %+v\nevents %v, were %v", subs, beforeSubs, events, beforeEvents)
			}
		})
	}
}

// doRaw is do returning the answer's body as text.
func (s *server) doRaw(t *testing.T, method, path, body string, header ...string) (string, *http.Response) {
	t.Helper()
	req, err := http.NewRequest(method, s.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw), res
}

// quote is a JSON string of s.
func quote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}
