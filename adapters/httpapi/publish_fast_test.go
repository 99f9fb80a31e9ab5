package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/dispatch-webhooks/dispatch/adapters/memory"
	"github.com/dispatch-webhooks/dispatch/application"
	"github.com/dispatch-webhooks/dispatch/ports"
)

type fixedClock struct{ t time.Time }

func (c fixedClock) Now() time.Time { return c.t }

type acceptingQueue struct{ ports.Queue }

func (acceptingQueue) Publish(context.Context, string, ...string) error { return nil }

// publishAPI is the API on a memory store with a fixed clock, with the fast
// publish path on or off.
func publishAPI(slow bool) *http.ServeMux {
	mux, _ := publishServer(slow)
	return mux
}

// testKey is the API key of the package's own tests.
const testKey = "test-key-1-0123456789abcdefghijklmnop"

// publishServer is publishAPI's mux with the huma API on it.
func publishServer(slow bool) (*http.ServeMux, huma.API) {
	store := memory.NewStore()
	clock := fixedClock{time.Date(2026, 5, 4, 3, 2, 1, 123456000, time.UTC)}
	mux := http.NewServeMux()
	api := newAPI(mux, Config{Version: "test", APIKeys: []string{testKey}, MaxEventBytes: 4096},
		UseCases{
			Ingest:        &application.Ingest{Events: store, Queue: acceptingQueue{}, Clock: clock},
			Subscriptions: &application.Subscriptions{Store: store, Clock: clock},
			Events:        &application.Events{Events: store, Deliveries: store},
			Deliveries:    &application.Deliveries{Deliveries: store, Subscriptions: store, Queue: acceptingQueue{}, Clock: clock},
		}, slog.New(slog.NewTextHandler(io.Discard, nil)), slow)
	return mux, api
}

// answer is a response with the event id taken out, so the two paths'
// answers compare byte for byte.
func answer(mux *http.ServeMux, body []byte, header map[string]string) (int, http.Header, string) {
	req := httptest.NewRequest(http.MethodPost, "/v1/events", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testKey)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, req)
	out := rec.Body.String()
	var ev struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(rec.Body.Bytes(), &ev) == nil && ev.ID != "" {
		out = strings.ReplaceAll(out, ev.ID, "ID")
	}
	return rec.Code, rec.Header(), out
}

func comparePaths(t *testing.T, fast, slow *http.ServeMux, body []byte, header map[string]string) int {
	t.Helper()
	fCode, fHeader, fBody := answer(fast, body, header)
	sCode, sHeader, sBody := answer(slow, body, header)
	if fCode >= 400 {
		// huma lists some validation errors in map order: compare them as
		// sets.
		fBody, sBody = sortedErrors(fBody), sortedErrors(sBody)
	}
	if fCode != sCode || fBody != sBody {
		t.Fatalf("for %q %v:\nfast path: %d %s\nhuma:      %d %s", body, header, fCode, fBody, sCode, sBody)
	}
	for _, h := range []string{"Content-Type", "Link", "Idempotent-Replayed", "WWW-Authenticate"} {
		if f, s := fHeader.Values(h), sHeader.Values(h); strings.Join(f, "\n") != strings.Join(s, "\n") {
			t.Fatalf("for %q: header %s: fast path %q, huma %q", body, h, f, s)
		}
	}
	return fCode
}

func sortedErrors(body string) string {
	var problem map[string]any
	if json.Unmarshal([]byte(body), &problem) != nil {
		return body
	}
	if errs, ok := problem["errors"].([]any); ok {
		slices.SortFunc(errs, func(a, b any) int {
			ja, _ := json.Marshal(a)
			jb, _ := json.Marshal(b)
			return bytes.Compare(ja, jb)
		})
	}
	out, _ := json.Marshal(problem)
	return string(out)
}

var publishSeeds = []string{
	`{"type":"order.created","source":"shop","data":{"id":1}}`,
	` {"type":"a","source":"","data":{},"ordering_key":"k"} `,
	`{"type":"a","source":"s","data":{ "b" : [1, 2.5, -0, true, false, null, {"c":"\u00e9\n"}] }}`,
	`{"type":"a","source":"s","data":{"n":1e999}}`,
	`{"type":"a","source":"s","data":{"n":1.5E3}}`,
	`{"type":"a","source":"s","data":{"n":01}}`,
	`{"type":"a","source":"s","data":{"x":"<b>&amp;</b>\u2028"}}`,
	`{"type":"a","source":"s","data":[]}`,
	`{"type":"a","source":"s","data":null}`,
	`{"type":"a..b","source":"s","data":{}}`,
	`{"type":"","source":"s","data":{}}`,
	`{"type":"a","source":"s","data":{},"type":"b"}`,
	`{"type":"a","source":"s","data":{},"extra":true}`,
	`{"type":"a","source":"s","data":{},"$schema":"https://x/y.json"}`,
	`{"type":"a","source":"s","data":{}`,
	`{"type":"a","source":"s","data":{}}x`,
	`{"type":"a","source":"caf` + "\xe9" + `","data":{}}`,
	`{"type":"a","source":"é","data":{"k":"` + "\xff" + `"}}`,
	`{"type":"` + strings.Repeat("a", 129) + `","source":"s","data":{}}`,
	`{"type":"a","source":"` + strings.Repeat("é", 256) + `","data":{}}`,
	`{"type":"a","source":"` + strings.Repeat("é", 257) + `","data":{}}`,
	`{"type":"a","source":"s","data":{"x":"` + strings.Repeat("x", 5000) + `"}}`,
	`{"type":"a","source":"s","data":` + strings.Repeat(`{"a":`, 70) + `1` + strings.Repeat(`}`, 70) + `}`,
	`{"source":"s","data":{}}`,
	`{"type":"a","data":{}}`,
	`{"type":"a","source":"s","ordering_key":null,"data":{}}`,
	`{"type":"a","source":"s","data":{"a":"\x"}}`,
	``, `null`, `[]`, `{}`, `{"type":`,
}

// The fast path answers every request exactly as huma's own path does:
// same status, same headers, same body (but for the new event's id).
func TestFastPublishAnswersAsHuma(t *testing.T) {
	t.Parallel()
	fast, slow := publishAPI(false), publishAPI(true)
	headers := []map[string]string{
		{"Content-Type": "application/json"},
		{"Content-Type": "application/json", "Idempotency-Key": "k-1"},
		{"Content-Type": "application/json", "X-Idempotency-Key": "k-1"},
		{"Content-Type": "application/json", "Idempotency-Key": strings.Repeat("k", 257)},
		{"Content-Type": "application/json", "Idempotency-Key": strings.Repeat("é", 200)},
		{"Content-Type": "application/json", "Accept": "application/json"},
		{"Content-Type": "application/json", "Accept": "text/html"},
		{"Content-Type": "application/json; charset=utf-8"},
		{"Content-Type": "text/plain"},
		{},
	}
	for _, h := range headers {
		for _, body := range publishSeeds {
			comparePaths(t, fast, slow, []byte(body), h)
		}
	}
}

// FuzzFastPublish compares the fast path with huma's on arbitrary bodies.
func FuzzFastPublish(f *testing.F) {
	for _, seed := range publishSeeds {
		f.Add([]byte(seed), "")
	}
	f.Add([]byte(publishSeeds[0]), "k-1")
	fast, slow := publishAPI(false), publishAPI(true)
	f.Fuzz(func(t *testing.T, body []byte, key string) {
		header := map[string]string{"Content-Type": "application/json"}
		if key != "" {
			header["Idempotency-Key"] = key
		}
		comparePaths(t, fast, slow, body, header)
	})
}

// A publish with a string that is not text (NUL, invalid UTF-8, a lone
// surrogate), in a field or anywhere in data, is refused with 422 naming
// its location, by both paths: what is accepted must be storable in
// PostgreSQL's text columns, ordering keys taken from data included.
func TestPublishRefusesStringsThatAreNotText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		body     string
		header   map[string]string
		location string
	}{
		{`{"type":"t.a","source":"s","data":{"k":"a\u0000b"}}`, nil, "body.data.k"},
		{`{"type":"t.a","source":"s","data":{"a":[{"b":"\ud800"}]}}`, nil, "body.data.a[0].b"},
		{`{"type":"t.a","source":"s","data":{"a\u0000":1}}`, nil, `body.data["a\x00"]`},
		{"{\"type\":\"t.a\",\"source\":\"s\",\"data\":{\"k\":\"\xff\"}}", nil, "body.data.k"},
		{`{"type":"t.a","source":"a\u0000b","data":{}}`, nil, "body.source"},
		{`{"type":"t.a","source":"s","ordering_key":"\u0000","data":{}}`, nil, "body.ordering_key"},
		{`{"type":"t.a","source":"s","data":{}}`, map[string]string{"Idempotency-Key": "k\xff"}, "header.Idempotency-Key"},
		{`{"type":"t.a","source":"s","data":{}}`, map[string]string{"X-Idempotency-Key": "k\x80"}, "header.X-Idempotency-Key"},
	}
	for _, slow := range []bool{false, true} {
		mux := publishAPI(slow)
		for _, tt := range tests {
			header := map[string]string{"Content-Type": "application/json"}
			for k, v := range tt.header {
				header[k] = v
			}
			code, _, body := answer(mux, []byte(tt.body), header)
			var problem struct {
				Errors []struct{ Location string }
			}
			_ = json.Unmarshal([]byte(body), &problem)
			if code != http.StatusUnprocessableEntity || len(problem.Errors) != 1 || problem.Errors[0].Location != tt.location {
				t.Errorf("huma path %v: %q: %d %s, want 422 at %s", slow, tt.body, code, body, tt.location)
			}
		}
	}
}
