package httpapi_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/dispatch-webhooks/dispatch/adapters/httpapi"
	"github.com/dispatch-webhooks/dispatch/adapters/memory"
	"github.com/dispatch-webhooks/dispatch/application"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// freshStore is a memory store the benchmark replaces now and then, so a
// long run measures the API, not a growing map and the garbage collector
// scanning every event published so far.
type freshStore struct{ *memory.Store }

// publishBodies are 1 KiB publish bodies: the shape dispatch-load's W1
// sends (one long string) and a structured payload of many small fields.
func publishBodies() map[string][]byte {
	pad := make([]byte, 1024-17-7)
	for i := range pad {
		pad[i] = 'a' + byte(i%26)
	}
	w1 := `{"type":"load.test","source":"dispatch-load","data":{"seq":1234567,"pad":"` + string(pad) + `"}}`
	var fields strings.Builder
	for i := 0; fields.Len() < 950; i++ {
		if i > 0 {
			fields.WriteByte(',')
		}
		fields.WriteString(`"field_` + strconv.Itoa(i) + `":{"id":"ord_` + strconv.Itoa(1000+i) + `","amount":` + strconv.Itoa(i*42) + `,"paid":true,"tags":["a","b"]}`)
	}
	structured := `{"type":"order.created","source":"shop","data":{` + fields.String() + `}}`
	return map[string][]byte{"w1": []byte(w1), "structured": []byte(structured)}
}

// BenchmarkPublish drives POST /v1/events through the server's handler (its
// bounds, then huma's), without a network: what the api process spends per
// publish, minus PostgreSQL and Redis.
func BenchmarkPublish(b *testing.B) {
	for _, name := range []string{"w1", "structured"} {
		body := publishBodies()[name]
		b.Run(name, func(b *testing.B) {
			store := &freshStore{memory.NewStore()}
			clock := ports.SystemClock{}
			mux := http.NewServeMux()
			log := slog.New(slog.NewTextHandler(io.Discard, nil))
			api := httpapi.New(mux, httpapi.Config{Version: "bench", APIKeys: []string{"test-key-0-0123456789abcdefghijklmnop", key}},
				httpapi.UseCases{
					Ingest:        &application.Ingest{Events: store, Queue: nopQueue{}, Clock: clock},
					Subscriptions: &application.Subscriptions{Store: store, Clock: clock},
					Events:        &application.Events{Events: store, Deliveries: store},
					Deliveries:    &application.Deliveries{Deliveries: store, Subscriptions: store, Queue: nopQueue{}, Clock: clock},
				}, log)
			handler := httpapi.NewServer(api, mux, log).Handler
			req := httptest.NewRequest(http.MethodPost, "/v1/events", nil)
			// As net/http's server hands a request over: the length in
			// the field and in the header.
			req.ContentLength = int64(len(body))
			req.Header.Set("Content-Length", strconv.Itoa(len(body)))
			req.Header.Set("Authorization", "Bearer "+key)
			req.Header.Set("Content-Type", "application/json")
			rd := bytes.NewReader(body)
			w := &discardResponse{header: http.Header{}}

			// One checked request first: the benchmark measures a 202.
			rd.Reset(body)
			req.Body = io.NopCloser(rd)
			rec := httptest.NewRecorder()
			handler.ServeHTTP(rec, req)
			var ev struct {
				ID   string          `json:"id"`
				Data json.RawMessage `json:"data"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &ev); rec.Code != http.StatusAccepted || err != nil || ev.ID == "" || len(ev.Data) < 900 {
				b.Fatalf("publish = %d %s (%v)", rec.Code, rec.Body, err)
			}

			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				if n++; n%4096 == 0 {
					store.Store = memory.NewStore()
				}
				rd.Reset(body)
				req.Body = io.NopCloser(rd)
				clear(w.header)
				w.status = 0
				handler.ServeHTTP(w, req)
				if w.status != http.StatusAccepted {
					b.Fatalf("status %d", w.status)
				}
			}
		})
	}
}

// discardResponse is a ResponseWriter that keeps only the status, so the
// benchmark does not measure a recorder's buffer.
type discardResponse struct {
	header http.Header
	status int
}

func (w *discardResponse) Header() http.Header { return w.header }

func (w *discardResponse) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}

func (w *discardResponse) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return len(p), nil
}
