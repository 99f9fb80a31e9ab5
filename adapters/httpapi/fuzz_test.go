package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dispatch-webhooks/dispatch/adapters/httpapi"
	"github.com/dispatch-webhooks/dispatch/adapters/memory"
	"github.com/dispatch-webhooks/dispatch/adapters/webhook"
	"github.com/dispatch-webhooks/dispatch/application"
	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// fuzzAPI is the API on a memory store, served without a network.
type fuzzAPI struct {
	mux    *http.ServeMux
	store  *memory.Store
	events *countedEvents
}

// countedEvents counts the events stored, whichever way ingest stores them
// (events fanned out inline never show in UnfannedEvents).
type countedEvents struct {
	*memory.Store
	stored atomic.Int64
}

func (c *countedEvents) CreateEvent(ctx context.Context, e domain.Event, keptSince time.Time) (domain.Event, bool, error) {
	stored, created, err := c.Store.CreateEvent(ctx, e, keptSince)
	if err == nil && created {
		c.stored.Add(1)
	}
	return stored, created, err
}

func (c *countedEvents) CreateEventFannedOut(ctx context.Context, e domain.Event, inline ports.InlineFanOut) ([]string, bool, error) {
	deliveries, fannedOut, err := c.Store.CreateEventFannedOut(ctx, e, inline)
	if err == nil {
		c.stored.Add(1)
	}
	return deliveries, fannedOut, err
}

func newFuzzAPI() fuzzAPI {
	store := memory.NewStore()
	events := &countedEvents{Store: store}
	clock := ports.SystemClock{}
	mux := http.NewServeMux()
	httpapi.New(mux, httpapi.Config{Version: "fuzz", APIKeys: []string{key}, MaxEventBytes: 4096},
		httpapi.UseCases{
			Ingest:        &application.Ingest{Events: events, Queue: nopQueue{}, Clock: clock},
			Subscriptions: &application.Subscriptions{Store: store, Clock: clock, Guard: webhook.Guard{Resolver: fakeDNS{}}},
			Events:        &application.Events{Events: store, Deliveries: store},
			Deliveries:    &application.Deliveries{Deliveries: store, Subscriptions: store, Queue: nopQueue{}, Clock: clock},
		}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	return fuzzAPI{mux: mux, store: store, events: events}
}

func (f fuzzAPI) post(path string, body []byte) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	f.mux.ServeHTTP(rec, req)
	return rec
}

func (f fuzzAPI) count(t *testing.T) (subs, events int) {
	list, err := f.store.ListSubscriptions(context.Background(), ports.Page{Limit: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	return len(list), int(f.events.stored.Load())
}

// FuzzPublishEvent feeds arbitrary bodies to POST /v1/events: the answer is
// 202 with an object as data, or a 4xx that stored nothing; never a 5xx.
func FuzzPublishEvent(f *testing.F) {
	for _, seed := range []string{
		`{"type":"order.created","source":"shop","data":{"id":1}}`,
		`{"type":"a","source":"","data":{},"ordering_key":"k"}`,
		`{"type":"a","source":"s","data":[]}`,
		`{"type":"a..b","source":"s","data":{}}`,
		`{"type":"a","source":"s","data":{"x":"\u0000"}}`,
		`{"type":"a","source":"s","data":{},"extra":true}`,
		`{"type":`, ``, `null`, `[]`,
	} {
		f.Add([]byte(seed))
	}
	api := newFuzzAPI()
	f.Fuzz(func(t *testing.T, body []byte) {
		_, before := api.count(t)
		rec := api.post("/v1/events", body)
		_, after := api.count(t)
		switch {
		case rec.Code == http.StatusAccepted:
			var ev struct {
				Data json.RawMessage `json:"data"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &ev); err != nil || len(ev.Data) == 0 || ev.Data[0] != '{' {
				t.Fatalf("202 with data %s (%v) for %q", ev.Data, err, body)
			}
			if after != before+1 {
				t.Fatalf("202 but %d events stored, want %d", after, before+1)
			}
		case rec.Code >= 400 && rec.Code < 500:
			if after != before {
				t.Fatalf("%d but the store changed (%d → %d events) for %q", rec.Code, before, after, body)
			}
		default:
			t.Fatalf("status %d for %q: %s", rec.Code, body, rec.Body)
		}
	})
}

// FuzzCreateSubscription feeds arbitrary bodies to POST /v1/subscriptions:
// the answer is 201 with a subscription that reads back equal, or a 4xx
// that stored nothing; never a 5xx.
func FuzzCreateSubscription(f *testing.F) {
	for _, seed := range []string{
		`{"url":"https://example.com/hook","event_types":["order.*"]}`,
		`{"url":"https://example.com/hook","event_types":["*"],"timeout":"1.5s","rate_limit":5,"max_in_flight":2}`,
		`{"url":"https://example.com/h","event_types":["a"],"retry_policy":{"strategy":"schedule","schedule":["1m","5m"]}}`,
		`{"url":"https://example.com/h","event_types":["a"],"ordering_key":"/data/customer_id","headers":{"X-A":"b"}}`,
		`{"url":"ftp://example.com","event_types":["a"]}`,
		`{"url":"http://localhost/","event_types":["a"]}`,
		`{"url":"https://example.com","event_types":["a"],"timeout":"-1s"}`,
		`{"url":"https://example.com","event_types":["a"],"secret":"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}`,
		`{}`, `{"url":`,
	} {
		f.Add([]byte(seed))
	}
	api := newFuzzAPI()
	f.Fuzz(func(t *testing.T, body []byte) {
		before, _ := api.count(t)
		rec := api.post("/v1/subscriptions", body)
		after, _ := api.count(t)
		switch {
		case rec.Code == http.StatusCreated:
			var sub struct {
				ID string `json:"id"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &sub); err != nil {
				t.Fatalf("201 with %s: %v", rec.Body, err)
			}
			stored, err := api.store.GetSubscription(context.Background(), sub.ID)
			if err != nil {
				t.Fatalf("201 but subscription %s not stored: %v", sub.ID, err)
			}
			if err := stored.Validate(); err != nil {
				t.Fatalf("stored an invalid subscription from %q: %v", body, err)
			}
			if after != before+1 {
				t.Fatalf("201 but %d subscriptions stored, want %d", after, before+1)
			}
		case rec.Code >= 400 && rec.Code < 500:
			if after != before {
				t.Fatalf("%d but the store changed for %q", rec.Code, body)
			}
		default:
			t.Fatalf("status %d for %q: %s", rec.Code, body, rec.Body)
		}
	})
}
