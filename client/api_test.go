package client_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/dispatch-webhooks/dispatch/adapters/httpapi"
	"github.com/dispatch-webhooks/dispatch/adapters/memory"
	"github.com/dispatch-webhooks/dispatch/application"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// startAPI serves the Dispatch API on in-memory adapters, with no worker:
// events stay pending, so the example's output is deterministic.
func startAPI() (baseURL, apiKey string, stop func()) {
	store := memory.NewStore()
	queue := memory.NewQueue(memory.QueueOptions{})
	clock := ports.SystemClock{}
	apiKey = "example-key-0123456789abcdefghijklmnop"
	mux := http.NewServeMux()
	httpapi.New(mux, httpapi.Config{Version: "example", APIKeys: []string{apiKey}},
		httpapi.UseCases{
			Ingest:        &application.Ingest{Events: store, Queue: queue, Clock: clock, IdempotencyWindow: time.Hour},
			Subscriptions: &application.Subscriptions{Store: store, Clock: clock},
			Events:        &application.Events{Events: store, Deliveries: store},
			Deliveries:    &application.Deliveries{Deliveries: store, Subscriptions: store, Queue: queue, Clock: clock},
		}, slog.New(slog.DiscardHandler))
	srv := httptest.NewServer(mux)
	return srv.URL, apiKey, srv.Close
}
