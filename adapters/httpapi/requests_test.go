package httpapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/dispatch-webhooks/dispatch/adapters/memory"
	"github.com/dispatch-webhooks/dispatch/application"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// refusingQueue fails every append: a publish is then committed but not
// enqueued, which the API logs within the request.
type refusingQueue struct{ ports.Queue }

func (refusingQueue) Publish(context.Context, string, ...ports.Entry) error {
	return errors.New("queue unavailable")
}

// logBuffer is a log's output, written by the server's goroutines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// lines decodes every line logged so far.
func (b *logBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.Lines(b.String()) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q is not JSON: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

// loggedServer serves the API on NewServer, as the api role does, on a
// memory store whose events are never enqueued, logging as JSON to logs.
func loggedServer(t *testing.T) (base string, logs *logBuffer) {
	t.Helper()
	logs = &logBuffer{}
	log := slog.New(slog.NewJSONHandler(logs, nil))
	store := memory.NewStore()
	clock := ports.SystemClock{}
	mux := http.NewServeMux()
	api := New(mux, Config{Version: "test", APIKeys: []string{testKey}},
		UseCases{
			Ingest:        &application.Ingest{Events: store, Queue: refusingQueue{}, Clock: clock, MaxInlineDeliveries: -1},
			Subscriptions: &application.Subscriptions{Store: store, Clock: clock},
			Events:        &application.Events{Events: store, Deliveries: store},
			Deliveries:    &application.Deliveries{Deliveries: store, Subscriptions: store, Queue: refusingQueue{}, Clock: clock},
		}, log)
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "# metrics\n") })
	srv := NewServer(api, mux, log)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		if err := errors.Join(srv.Shutdown(context.Background()), <-served); !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("HTTP server: %v", err)
		}
	})
	return "http://" + ln.Addr().String(), logs
}

var generatedID = regexp.MustCompile(`^[0-9a-f]{32}$`)

// Every answer carries X-Request-Id: the client's when it is 1..128
// visible ASCII characters, a new one otherwise.
func TestEveryAnswerCarriesARequestID(t *testing.T) {
	t.Parallel()
	base, _ := loggedServer(t)
	long := strings.Repeat("r", maxRequestIDLength)
	for _, tc := range []struct {
		method, path, sent string
		keep               bool
	}{
		{http.MethodGet, "/v1/subscriptions", "trace-42", true},
		{http.MethodPost, "/v1/events", "9f1c2a7e-b0d3-4c55-8a61-3e2f0d4c9b10", true},
		{http.MethodGet, "/health", long, true},
		{http.MethodGet, "/nowhere", "~!#$%&'*+-.^_`|", true},
		{http.MethodGet, "/v1/subscriptions", "", false},
		{http.MethodPost, "/v1/events", "", false},
		{http.MethodGet, "/v1/subscriptions", long + "r", false},
		{http.MethodGet, "/v1/subscriptions", "has space", false},
		{http.MethodGet, "/v1/subscriptions", "tab\there", false},
		{http.MethodGet, "/v1/subscriptions", "caf\u00e9", false},
		{http.MethodGet, "/metrics", "", false},
	} {
		header := map[string]string{"Content-Type": "application/json"}
		if tc.sent != "" {
			header[requestIDHeader] = tc.sent
		}
		r := request{method: tc.method, path: tc.path, header: header}
		if tc.method == http.MethodPost {
			r.body = []byte(`{"type":"a","source":"s","data":{}}`)
		}
		_, got, _ := r.send(t, base)
		id := got.Get(requestIDHeader)
		switch {
		case tc.keep && id != tc.sent:
			t.Errorf("%s %s with X-Request-Id %q: answered %q, want it back", tc.method, tc.path, tc.sent, id)
		case !tc.keep && !generatedID.MatchString(id):
			t.Errorf("%s %s with X-Request-Id %q: answered %q, want a new id of 32 hex digits", tc.method, tc.path, tc.sent, id)
		}
	}
}

// Every request gets one access-log line with its method, route template,
// status, duration, id and key id, never the key or the body; the other
// lines logged within the request carry its id too.
func TestEveryRequestIsLoggedOnceWithoutItsKey(t *testing.T) {
	t.Parallel()
	base, logs := loggedServer(t)
	digest := sha256.Sum256([]byte(testKey))
	keyID := hex.EncodeToString(digest[:4])
	const marker = "payload-that-must-not-be-logged"
	noKey := map[string]string{"Authorization": ""}
	type want struct {
		method, route, keyID string
		status               int
	}
	cases := []struct {
		r    request
		want want
	}{
		{request{method: http.MethodGet, path: "/v1/subscriptions/sub_missing"}, want{http.MethodGet, "/v1/subscriptions/{id}", keyID, http.StatusNotFound}},
		{request{method: http.MethodPost, path: "/v1/events", body: []byte(`{"type":"a","source":"s","data":{"m":"` + marker + `"}}`),
			header: map[string]string{"Content-Type": "application/json"}}, want{http.MethodPost, "/v1/events", keyID, http.StatusAccepted}},
		{request{method: http.MethodPost, path: "/v1/subscriptions", body: []byte(`{"url":"ftp://` + marker + `"}`),
			header: map[string]string{"Content-Type": "application/json"}}, want{http.MethodPost, "/v1/subscriptions", keyID, http.StatusUnprocessableEntity}},
		{request{method: http.MethodGet, path: "/v1/subscriptions", header: noKey}, want{http.MethodGet, "/v1/subscriptions", "", http.StatusUnauthorized}},
		{request{method: http.MethodPost, path: "/v1/subscriptions", body: []byte(`{}`), header: noKey}, want{http.MethodPost, "/v1/subscriptions", "", http.StatusUnauthorized}},
		{request{method: http.MethodGet, path: "/health", header: noKey}, want{http.MethodGet, "/health", "", http.StatusOK}},
		{request{method: http.MethodGet, path: "/metrics", header: noKey}, want{http.MethodGet, "/metrics", "", http.StatusOK}},
		{request{method: http.MethodGet, path: "/openapi.json", header: noKey}, want{http.MethodGet, "/openapi.json", "", http.StatusOK}},
		{request{method: http.MethodGet, path: "/nowhere", header: noKey}, want{http.MethodGet, "", "", http.StatusNotFound}},
	}
	ids := make([]string, len(cases))
	for i, tc := range cases {
		_, header, _ := tc.r.send(t, base)
		ids[i] = header.Get(requestIDHeader)
	}

	lines := logs.lines(t)
	for i, tc := range cases {
		var access []map[string]any
		for _, l := range lines {
			if l["msg"] == "request" && l["request_id"] == ids[i] {
				access = append(access, l)
			}
		}
		if len(access) != 1 {
			t.Errorf("%s %s: %d access-log lines with its id %s, want 1", tc.r.method, tc.r.path, len(access), ids[i])
			continue
		}
		l := access[0]
		got := want{method: str(l["method"]), route: str(l["route"]), keyID: str(l["key_id"])}
		if s, ok := l["status"].(float64); ok {
			got.status = int(s)
		}
		if got != tc.want {
			t.Errorf("%s %s: logged %+v, want %+v", tc.r.method, tc.r.path, got, tc.want)
		}
		if d, ok := l["duration_ms"].(float64); !ok || d < 0 {
			t.Errorf("%s %s: duration_ms %v, want a number of milliseconds", tc.r.method, tc.r.path, l["duration_ms"])
		}
	}
	var enqueueWarned bool
	for _, l := range lines {
		if strings.Contains(str(l["msg"]), "not enqueued") {
			enqueueWarned = true
			if l["request_id"] != ids[1] {
				t.Errorf("the publish's own log line %v does not carry its request id %s", l, ids[1])
			}
		}
	}
	if !enqueueWarned {
		t.Errorf("the publish logged nothing about its event not being enqueued; log:\n%s", logs)
	}
	if all := logs.String(); strings.Contains(all, testKey) || strings.Contains(all, marker) {
		t.Errorf("the log holds the key or a body:\n%s", all)
	}
}

func str(v any) string { s, _ := v.(string); return s }
