package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-webhooks/dispatch/adapters/httpapi"
	"github.com/dispatch-webhooks/dispatch/adapters/memory"
	"github.com/dispatch-webhooks/dispatch/adapters/webhook"
	"github.com/dispatch-webhooks/dispatch/application"
	"github.com/dispatch-webhooks/dispatch/ports"
)

const key = "test-key-1-0123456789abcdefghijklmnop"

// fakeDNS resolves localhost to loopback and every other name to a public
// address, so the SSRF guard runs without a network.
type fakeDNS struct{}

func (fakeDNS) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if host == "localhost" {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}
	return []netip.Addr{netip.MustParseAddr("93.184.216.34")}, nil
}

// nopQueue accepts every publish; these tests look at the store.
type nopQueue struct{ ports.Queue }

func (nopQueue) Publish(context.Context, string, ...ports.Entry) error { return nil }

type server struct {
	*httptest.Server
	store *memory.Store
}

func newServer(t *testing.T) *server {
	t.Helper()
	store := memory.NewStore()
	clock := ports.SystemClock{}
	mux := http.NewServeMux()
	httpapi.New(mux, httpapi.Config{Version: "test", APIKeys: []string{"test-key-0-0123456789abcdefghijklmnop", key}, MaxEventBytes: 4096},
		httpapi.UseCases{
			// Inline fan-out off: every stored event then stays in the
			// outbox, where counts finds it.
			Ingest:        &application.Ingest{Events: store, Queue: nopQueue{}, Clock: clock, MaxInlineDeliveries: -1},
			Subscriptions: &application.Subscriptions{Store: store, Clock: clock, Guard: webhook.Guard{Resolver: fakeDNS{}}},
			Events:        &application.Events{Events: store, Deliveries: store},
			Deliveries:    &application.Deliveries{Deliveries: store, Subscriptions: store, Queue: nopQueue{}, Clock: clock},
		}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &server{Server: srv, store: store}
}

func (s *server) do(t *testing.T, method, path, body string, header ...string) (*http.Response, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, s.URL+path, strings.NewReader(body))
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
	raw, _ := io.ReadAll(res.Body)
	var out map[string]any
	_ = json.Unmarshal(raw, &out)
	return res, out
}

func (s *server) counts(t *testing.T) (subs, events int) {
	t.Helper()
	list, err := s.store.ListSubscriptions(context.Background(), ports.Page{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	ids, err := s.store.UnfannedEvents(context.Background(), farFuture, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	return len(list), len(ids)
}

func TestBadRequestsGetAPreciseErrorAndChangeNothing(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	big := `{"type":"a","source":"s","data":{"x":"` + strings.Repeat("x", 5000) + `"}}`
	tests := []struct {
		name, method, path, body string
		header                   []string
		status                   int
	}{
		{"no key", "GET", "/v1/subscriptions", "", []string{"Authorization", ""}, 401},
		{"wrong key", "GET", "/v1/subscriptions", "", []string{"Authorization", "Bearer nope"}, 401},
		{"not bearer", "GET", "/v1/subscriptions", "", []string{"Authorization", "Basic " + key}, 401},
		{"unknown subscription field", "POST", "/v1/subscriptions", `{"url":"https://e.com","event_types":["a"],"colour":"red"}`, nil, 422},
		{"ftp url", "POST", "/v1/subscriptions", `{"url":"ftp://e.com/x","event_types":["a"]}`, nil, 422},
		{"no event types", "POST", "/v1/subscriptions", `{"url":"https://e.com","event_types":[]}`, nil, 422},
		{"bad pattern", "POST", "/v1/subscriptions", `{"url":"https://e.com","event_types":["a*"]}`, nil, 422},
		{"bad duration", "POST", "/v1/subscriptions", `{"url":"https://e.com","event_types":["a"],"timeout":"soon"}`, nil, 422},
		{"negative rate limit", "POST", "/v1/subscriptions", `{"url":"https://e.com","event_types":["a"],"rate_limit":-5}`, nil, 422},
		{"bad json pointer", "POST", "/v1/subscriptions", `{"url":"https://e.com","event_types":["a"],"ordering_key":"data/x"}`, nil, 422},
		{"bad secret", "POST", "/v1/subscriptions", `{"url":"https://e.com","event_types":["a"],"secret":"hunter2"}`, nil, 422},
		{"malformed json", "POST", "/v1/subscriptions", `{"url":`, nil, 400},
		{"unknown event field", "POST", "/v1/events", `{"type":"a","source":"s","data":{},"extra":1}`, nil, 422},
		{"array data", "POST", "/v1/events", `{"type":"a","source":"s","data":[1,2]}`, nil, 422},
		{"string data", "POST", "/v1/events", `{"type":"a","source":"s","data":"x"}`, nil, 422},
		{"missing data", "POST", "/v1/events", `{"type":"a","source":"s"}`, nil, 422},
		{"bad type", "POST", "/v1/events", `{"type":"a..b","source":"s","data":{}}`, nil, 422},
		{"oversize body", "POST", "/v1/events", big, nil, 413},
		{"unknown subscription", "GET", "/v1/subscriptions/sub_nope", "", nil, 404},
		{"delete unknown subscription", "DELETE", "/v1/subscriptions/sub_nope", "", nil, 404},
		{"unknown event", "GET", "/v1/events/evt_nope", "", nil, 404},
		{"unknown event attempts", "GET", "/v1/events/evt_nope/attempts", "", nil, 404},
		{"bad cursor", "GET", "/v1/subscriptions?cursor=not-a-cursor", "", nil, 400},
		{"limit too large", "GET", "/v1/subscriptions?limit=100000", "", nil, 422},
		{"metadata address", "POST", "/v1/subscriptions", `{"url":"http://169.254.169.254/latest","event_types":["a"]}`, nil, 422},
		{"host resolving to loopback", "POST", "/v1/subscriptions", `{"url":"http://localhost:9/hook","event_types":["a"]}`, nil, 422},
		{"private address", "POST", "/v1/subscriptions", `{"url":"https://10.0.0.8/hook","event_types":["a"]}`, nil, 422},
		{"zero timeout", "POST", "/v1/subscriptions", `{"url":"https://e.com","event_types":["a"],"timeout":"0s"}`, nil, 422},
		{"unknown retry strategy", "POST", "/v1/subscriptions", `{"url":"https://e.com","event_types":["a"],"retry_policy":{"strategy":"linear"}}`, nil, 422},
		{"reserved header", "POST", "/v1/subscriptions", `{"url":"https://e.com","event_types":["a"],"headers":{"webhook-signature":"x"}}`, nil, 422},
		{"wrong content type", "POST", "/v1/events", `{"type":"a","source":"s","data":{}}`, []string{"Content-Type", "text/plain"}, 415},
		{"non-json body", "POST", "/v1/events", `type=a`, nil, 400},
		{"unknown delivery", "GET", "/v1/deliveries/dlv_nope", "", nil, 404},
		{"retry unknown delivery", "POST", "/v1/deliveries/dlv_nope/retry", "", nil, 404},
		{"bad delivery status filter", "GET", "/v1/deliveries?status=lost", "", nil, 422},
		{"patch unknown subscription", "PATCH", "/v1/subscriptions/sub_nope", `{"description":"x"}`, nil, 404},
		{"rotate unknown subscription", "POST", "/v1/subscriptions/sub_nope/rotate-secret", "", nil, 404},
		{"secret of unknown subscription", "GET", "/v1/subscriptions/sub_nope/secret", "", nil, 404},
		{"recover unknown subscription", "POST", "/v1/subscriptions/sub_nope/recover", `{"since":"2026-01-01T00:00:00Z"}`, nil, 404},
		{"recover without since", "POST", "/v1/subscriptions/sub_nope/recover", `{}`, nil, 422},
		{"long idempotency key", "POST", "/v1/events", `{"type":"a","source":"s","data":{}}`, []string{"Idempotency-Key", strings.Repeat("k", 300)}, 422},
		{"NUL in data", "POST", "/v1/events", `{"type":"a","source":"s","data":{"k":"a\u0000b"}}`, nil, 422},
		{"NUL in a data member name", "POST", "/v1/events", `{"type":"a","source":"s","data":{"a\u0000":1}}`, nil, 422},
		{"lone surrogate in data", "POST", "/v1/events", `{"type":"a","source":"s","data":{"k":["\udfff"]}}`, nil, 422},
		{"invalid UTF-8 in data", "POST", "/v1/events", "{\"type\":\"a\",\"source\":\"s\",\"data\":{\"k\":\"\xff\"}}", nil, 422},
		{"NUL in source", "POST", "/v1/events", `{"type":"a","source":"a\u0000b","data":{}}`, nil, 422},
		{"NUL in ordering key", "POST", "/v1/events", `{"type":"a","source":"s","ordering_key":"\u0000","data":{}}`, nil, 422},
		{"NUL in type", "POST", "/v1/events", `{"type":"a\u0000","source":"s","data":{}}`, nil, 422},
		{"invalid UTF-8 in idempotency key", "POST", "/v1/events", `{"type":"a","source":"s","data":{}}`, []string{"Idempotency-Key", "k\xff"}, 422},
		{"NUL in a path id", "GET", "/v1/events/evt_%00", "", nil, 422},
		{"invalid UTF-8 in a path id", "GET", "/v1/subscriptions/sub_%FF", "", nil, 422},
		{"NUL in a query filter", "GET", "/v1/deliveries?subscription_id=sub_%00", "", nil, 422},
		{"NUL in a cursor", "GET", "/v1/subscriptions?cursor=YzE6AA", "", nil, 400},
		{"NUL in description", "POST", "/v1/subscriptions", `{"url":"https://e.com","event_types":["a"],"description":"a\u0000b"}`, nil, 422},
		{"NUL in subscription ordering key", "POST", "/v1/subscriptions", `{"url":"https://e.com","event_types":["a"],"ordering_key":"/data/\u0000"}`, nil, 422},
		{"NUL in url", "POST", "/v1/subscriptions", `{"url":"https://e.com/\u0000","event_types":["a"]}`, nil, 422},
		{"NUL in event type pattern", "POST", "/v1/subscriptions", `{"url":"https://e.com","event_types":["a\u0000"]}`, nil, 422},
		{"NUL in secret", "POST", "/v1/subscriptions", `{"url":"https://e.com","event_types":["a"],"secret":"whsec_\u0000"}`, nil, 422},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, body := s.do(t, tt.method, tt.path, tt.body, tt.header...)
			if res.StatusCode != tt.status {
				t.Errorf("status = %d, want %d: %v", res.StatusCode, tt.status, body)
			}
			if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
				t.Errorf("content type = %q, want application/problem+json", ct)
			}
			if body["status"] != float64(tt.status) || body["title"] == "" || body["title"] == nil {
				t.Errorf("problem = %v, want status %d and a title", body, tt.status)
			}
			if subs, events := s.counts(t); subs != 0 || events != 0 {
				t.Errorf("store changed: %d subscriptions, %d events", subs, events)
			}
		})
	}
}

func TestSubscriptionLifecycle(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	res, sub := s.do(t, "POST", "/v1/subscriptions", `{"url":"https://example.com/hook","event_types":["order.*"],"retry_policy":{"strategy":"schedule","schedule":["1m","5m"]}}`)
	if res.StatusCode != 201 {
		t.Fatalf("create = %d: %v", res.StatusCode, sub)
	}
	if secret, _ := sub["secret"].(string); !strings.HasPrefix(secret, "whsec_") {
		t.Errorf("create answered secret %q, want a generated whsec_ secret", secret)
	}
	rp := sub["retry_policy"].(map[string]any)
	if rp["strategy"] != "schedule" || rp["max_attempts"] != float64(3) {
		t.Errorf("retry_policy = %v, want schedule with max_attempts 3", rp)
	}
	id := sub["id"].(string)
	res, got := s.do(t, "GET", "/v1/subscriptions/"+id, "")
	if res.StatusCode != 200 || got["url"] != "https://example.com/hook" || got["timeout"] != "10s" || got["rate_limit"] != float64(100) {
		t.Errorf("get = %d %v", res.StatusCode, got)
	}
	if _, ok := got["secret"]; ok {
		t.Error("get returned the secret")
	}
	if res, _ := s.do(t, "DELETE", "/v1/subscriptions/"+id, ""); res.StatusCode != 204 {
		t.Errorf("delete = %d, want 204", res.StatusCode)
	}
	if res, _ := s.do(t, "GET", "/v1/subscriptions/"+id, ""); res.StatusCode != 404 {
		t.Errorf("get after delete = %d, want 404", res.StatusCode)
	}
}

func TestListSubscriptionsPages(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	var ids []string
	for range 5 {
		_, sub := s.do(t, "POST", "/v1/subscriptions", `{"url":"https://example.com/hook","event_types":["a"]}`)
		ids = append(ids, sub["id"].(string))
	}
	var seen []string
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("pagination does not end")
		}
		_, page := s.do(t, "GET", "/v1/subscriptions?limit=2&cursor="+cursor, "")
		for _, item := range page["data"].([]any) {
			m := item.(map[string]any)
			seen = append(seen, m["id"].(string))
			if _, ok := m["secret"]; ok {
				t.Error("list returned a secret")
			}
		}
		next, ok := page["next_cursor"].(string)
		if !ok {
			if page["next_cursor"] != nil {
				t.Fatalf("next_cursor = %v", page["next_cursor"])
			}
			break
		}
		cursor = next
	}
	if strings.Join(seen, ",") != strings.Join(ids, ",") {
		t.Errorf("pages gave %v, want %v", seen, ids)
	}
}

func TestPublishAndIdempotentReplay(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	body := `{"type":"order.created","source":"shop","data":{"b":1,"a":[true,null]}}`
	res, ev := s.do(t, "POST", "/v1/events", body, "Idempotency-Key", "k-1")
	if res.StatusCode != 202 || ev["status"] != "pending" {
		t.Fatalf("publish = %d %v", res.StatusCode, ev)
	}
	data, _ := json.Marshal(ev["data"])
	if string(data) != `{"a":[true,null],"b":1}` { // re-encoded by the test's map; key order is Go's
		t.Errorf("data = %s", data)
	}
	res, again := s.do(t, "POST", "/v1/events", body, "X-Idempotency-Key", "k-1")
	if res.StatusCode != 200 || res.Header.Get("Idempotent-Replayed") != "true" || again["id"] != ev["id"] {
		t.Errorf("replay = %d %q %v, want 200, Idempotent-Replayed: true, same id", res.StatusCode, res.Header.Get("Idempotent-Replayed"), again["id"])
	}
	res, got := s.do(t, "GET", "/v1/events/"+ev["id"].(string), "")
	if res.StatusCode != 200 || got["type"] != "order.created" || got["deliveries"] == nil {
		t.Errorf("get event = %d %v", res.StatusCode, got)
	}
}

// A publish body is decoded once, by hand (publishInput.Resolve), so this
// checks what huma's schema validation would answer.
func TestPublishBodyIsCheckedAsItsSchemaSays(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	for _, tt := range []struct {
		name, body, contentType string
		status                  int
		location                string
	}{
		{"the schema link huma's answers carry", `{"$schema":"https://x/schemas/PublishBody.json","type":"a","source":"s","data":{}}`, "application/json", 202, ""},
		{"a +json content type", `{"type":"a","source":"s","data":{}}`, "application/vnd.api+json; charset=utf-8", 202, ""},
		{"an unknown field", `{"type":"a","source":"s","data":{},"extra":1}`, "application/json", 422, "body.extra"},
		{"a field of the wrong type", `{"type":"a","source":["s"],"data":{}}`, "application/json", 422, "body.source"},
		{"a body that is not an object", `[1]`, "application/json", 422, "body"},
		{"a second value after the body", `{"type":"a","source":"s","data":{}} {}`, "application/json", 400, "body"},
		{"malformed JSON", `{"type":"a",}`, "application/json", 400, "body"},
		{"XML", `<event/>`, "application/xml", 415, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest("POST", s.URL+"/v1/events", strings.NewReader(tt.body))
			req.Header.Set("Authorization", "Bearer "+key)
			req.Header.Set("Content-Type", tt.contentType)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			var got struct {
				Errors []struct{ Location string } `json:"errors"`
			}
			_ = json.NewDecoder(res.Body).Decode(&got)
			if res.StatusCode != tt.status {
				t.Fatalf("status = %d, want %d (%+v)", res.StatusCode, tt.status, got)
			}
			if tt.location != "" && (len(got.Errors) != 1 || got.Errors[0].Location != tt.location) {
				t.Errorf("errors = %+v, want one at %s", got.Errors, tt.location)
			}
		})
	}
}

func TestHealthNeedsNoKey(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	for _, path := range []string{"/health", "/ready", "/openapi.json"} {
		res, err := http.Get(s.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 200 {
			t.Errorf("GET %s = %d, want 200", path, res.StatusCode)
		}
	}
}

var farFuture = time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)

func TestRotateSecretKeepsThePreviousOneSigning(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	_, sub := s.do(t, "POST", "/v1/subscriptions", `{"url":"https://example.com/hook","event_types":["a"]}`)
	id, first := sub["id"].(string), sub["secret"].(string)
	res, rotated := s.do(t, "POST", "/v1/subscriptions/"+id+"/rotate-secret", "")
	if res.StatusCode != 200 {
		t.Fatalf("rotate = %d %v", res.StatusCode, rotated)
	}
	second, _ := rotated["secret"].(string)
	if !strings.HasPrefix(second, "whsec_") || second == first {
		t.Errorf("rotated secret %q, want a new whsec_ secret", second)
	}
	expires, err := time.Parse(time.RFC3339Nano, rotated["previous_secret_expires_at"].(string))
	if err != nil || time.Until(expires) < 23*time.Hour {
		t.Errorf("previous_secret_expires_at = %v, want about 24h from now", rotated["previous_secret_expires_at"])
	}
	_, got := s.do(t, "GET", "/v1/subscriptions/"+id+"/secret", "")
	if got["secret"] != second {
		t.Errorf("GET secret = %v, want the rotated one", got["secret"])
	}
	chosen := "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	if _, again := s.do(t, "POST", "/v1/subscriptions/"+id+"/rotate-secret", `{"secret":"`+chosen+`"}`); again["secret"] != chosen {
		t.Errorf("rotate to a chosen secret answered %v", again["secret"])
	}
	if res, _ := s.do(t, "POST", "/v1/subscriptions/"+id+"/rotate-secret", `{"secret":"nope"}`); res.StatusCode != 422 {
		t.Errorf("rotate to a bad secret = %d, want 422", res.StatusCode)
	}
	if _, again := s.do(t, "GET", "/v1/subscriptions/"+id+"/secret", ""); again["secret"] != chosen {
		t.Error("a refused rotation changed the secret")
	}
}

// TestReadsNeverReturnHeaderValues: header values are credentials; every
// answer shows "***" in their place, and a patch that sends "***" back
// keeps the stored value while a new value replaces it.
func TestReadsNeverReturnHeaderValues(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	const token = "Bearer secret-token-123"
	res, created := s.do(t, "POST", "/v1/subscriptions",
		`{"url":"https://example.com/hook","event_types":["order.*"],"headers":{"Authorization":"`+token+`","X-Tenant":"acme"}}`)
	if res.StatusCode != 201 {
		t.Fatalf("create = %d: %v", res.StatusCode, created)
	}
	id := created["id"].(string)
	redacted := map[string]any{"Authorization": "***", "X-Tenant": "***"}
	checkRedacted := func(what string, sub map[string]any, want map[string]any) {
		t.Helper()
		if !reflect.DeepEqual(sub["headers"], want) {
			t.Errorf("%s: headers = %v, want %v", what, sub["headers"], want)
		}
	}
	checkRedacted("create", created, redacted)
	_, got := s.do(t, "GET", "/v1/subscriptions/"+id, "")
	checkRedacted("get", got, redacted)
	res, list := s.do(t, "GET", "/v1/subscriptions", "")
	raw, _ := json.Marshal(list)
	if res.StatusCode != 200 || strings.Contains(string(raw), "secret-token-123") || strings.Contains(string(raw), "acme") {
		t.Errorf("list = %d %s, want header values hidden", res.StatusCode, raw)
	}
	stored := func() map[string]string {
		t.Helper()
		sub, err := s.store.GetSubscription(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		return sub.Headers
	}

	res, patched := s.do(t, "PATCH", "/v1/subscriptions/"+id, `{"headers":{"Authorization":"***","X-Tenant":"globex"}}`)
	if res.StatusCode != 200 {
		t.Fatalf("patch = %d: %v", res.StatusCode, patched)
	}
	checkRedacted("patch", patched, redacted)
	if want := map[string]string{"Authorization": token, "X-Tenant": "globex"}; !reflect.DeepEqual(stored(), want) {
		t.Errorf("after a patch sending *** back: stored %v, want %v", stored(), want)
	}
	res, _ = s.do(t, "PATCH", "/v1/subscriptions/"+id, `{"headers":{"Authorization":"Bearer secret-token-456"}}`)
	if want := map[string]string{"Authorization": "Bearer secret-token-456"}; res.StatusCode != 200 || !reflect.DeepEqual(stored(), want) {
		t.Errorf("after a patch with a new value: %d, stored %v, want %v", res.StatusCode, stored(), want)
	}
	res, problem := s.do(t, "PATCH", "/v1/subscriptions/"+id, `{"headers":{"X-Other":"***"}}`)
	if res.StatusCode != 422 || !strings.Contains(fmt.Sprint(problem), "headers") {
		t.Errorf("a *** with no stored value = %d %v, want 422 naming headers", res.StatusCode, problem)
	}
	if want := map[string]string{"Authorization": "Bearer secret-token-456"}; !reflect.DeepEqual(stored(), want) {
		t.Errorf("a refused patch changed the headers to %v", stored())
	}
}
