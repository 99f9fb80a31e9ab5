package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// transports serves the same API twice, each on a store of its own: over
// net/http, and over fasthttp through NewServer.
type transports struct {
	netURL, fastURL string
	// converted counts the publishes fasthttp handed to net/http.
	converted *atomic.Int64
}

func newTransports(t *testing.T) transports {
	t.Helper()
	netMux, _ := publishServer(false)
	std := httptest.NewServer(netMux)
	t.Cleanup(std.Close)

	fastMux, api := publishServer(false)
	converted := new(atomic.Int64)
	srv := NewServer(api, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/events" {
			converted.Add(1)
		}
		fastMux.ServeHTTP(w, r)
	}), slog.New(slog.NewTextHandler(io.Discard, nil)))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		if err := errors.Join(srv.Shutdown(), <-served); err != nil {
			t.Errorf("fasthttp server: %v", err)
		}
	})
	return transports{netURL: std.URL, fastURL: "http://" + ln.Addr().String(), converted: converted}
}

// request is one request to send over both transports. A chunked body is
// sent without a length.
type request struct {
	method, path string
	body         []byte
	chunked      bool
	header       map[string]string
}

// send sends r to base with the test key (unless r's header sets
// Authorization itself) and returns its answer with any "id" in the body
// replaced, as answer does, and the server's address (in schema links)
// too.
func (r request) send(t *testing.T, base string) (int, http.Header, string) {
	t.Helper()
	var body io.Reader = bytes.NewReader(r.body)
	if r.chunked {
		body = io.MultiReader(body) // hides the length: sent chunked
	}
	req, err := http.NewRequest(r.method, base+r.path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testKey)
	for k, v := range r.header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", r.method, r.path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	host := strings.TrimPrefix(base, "http://")
	out := strings.ReplaceAll(string(raw), host, "HOST")
	for _, v := range resp.Header["Link"] {
		resp.Header.Add("Link-Hostless", strings.ReplaceAll(v, host, "HOST"))
	}
	var ev struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(raw, &ev) == nil && ev.ID != "" {
		out = strings.ReplaceAll(out, ev.ID, "ID")
	}
	return resp.StatusCode, resp.Header, out
}

// compare fails unless both transports answer r alike: status, body and
// the headers an API client reads.
func (tr transports) compare(t *testing.T, r request) int {
	t.Helper()
	sCode, sHeader, sBody := r.send(t, tr.netURL)
	fCode, fHeader, fBody := r.send(t, tr.fastURL)
	if fCode >= 400 {
		fBody, sBody = sortedErrors(fBody), sortedErrors(sBody)
	}
	if fCode == http.StatusRequestEntityTooLarge && sCode == fCode {
		// fasthttp refuses a declared length over the limit before reading
		// the body, so before huma checks anything else of the request.
		fBody, sBody = "", ""
	}
	if fCode != sCode || fBody != sBody {
		t.Fatalf("%s %s %q %v (chunked %v):\nfasthttp: %d %s\nnet/http: %d %s", r.method, r.path, r.body, r.header, r.chunked, fCode, fBody, sCode, sBody)
	}
	for _, h := range []string{"Content-Type", "Link-Hostless", "Idempotent-Replayed", "WWW-Authenticate", "Allow"} {
		if f, s := fHeader.Values(h), sHeader.Values(h); strings.Join(f, "\n") != strings.Join(s, "\n") {
			t.Fatalf("%s %s %q: header %s: fasthttp %q, net/http %q", r.method, r.path, r.body, h, f, s)
		}
	}
	return fCode
}

// Publishes, served natively on fasthttp, are answered exactly as over
// net/http: every seed body with every header set, sent with a length and
// chunked, bodies over the limit (streamed to huma) included.
func TestFastHTTPServerPublishesAsNetHTTP(t *testing.T) {
	t.Parallel()
	tr := newTransports(t)
	headers := []map[string]string{
		{"Content-Type": "application/json"},
		{"Content-Type": "application/json", "Idempotency-Key": "k-1"},
		{"Content-Type": "application/json", "X-Idempotency-Key": "k-2"},
		{"Content-Type": "application/json", "Idempotency-Key": strings.Repeat("k", 257)},
		{"Content-Type": "application/json", "Accept": "text/html"},
		{"Content-Type": "text/plain"},
		{"Content-Type": "application/json", "Authorization": ""},
		{"Content-Type": "application/json", "Authorization": "Bearer wrong"},
		{},
	}
	bodies := append(publishSeeds, `{"type":"a","source":"s","data":{"x":"`+strings.Repeat("x", 10_000)+`"}}`)
	codes := map[int]bool{}
	for _, h := range headers {
		for _, body := range bodies {
			for _, chunked := range []bool{false, true} {
				codes[tr.compare(t, request{method: http.MethodPost, path: "/v1/events", body: []byte(body), chunked: chunked, header: h})] = true
			}
		}
	}
	// The comparison covered accepted, replayed and refused publishes.
	for _, want := range []int{http.StatusAccepted, http.StatusOK, http.StatusBadRequest, http.StatusUnauthorized,
		http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType, http.StatusUnprocessableEntity} {
		if !codes[want] {
			t.Errorf("no request was answered %d; answered: %v", want, codes)
		}
	}
	if n := tr.converted.Load(); n > 0 {
		t.Errorf("%d publishes went through net/http's handler, want none", n)
	}
}

// Every other request goes through the net/http handler, converted.
func TestFastHTTPServerServesTheRestThroughNetHTTP(t *testing.T) {
	t.Parallel()
	tr := newTransports(t)
	for _, r := range []request{
		{method: http.MethodGet, path: "/v1/subscriptions"},
		{method: http.MethodGet, path: "/v1/subscriptions", header: map[string]string{"Authorization": ""}},
		{method: http.MethodPost, path: "/v1/subscriptions", body: []byte(`{"url":"ftp://x"}`), header: map[string]string{"Content-Type": "application/json"}},
		// Refused by fasthttp before the body is read, as huma refuses it.
		{method: http.MethodPost, path: "/v1/subscriptions", body: []byte(`{"url":"ftp://x"}`), header: map[string]string{"Content-Type": "application/json", "Authorization": ""}},
		{method: http.MethodPost, path: "/v1/subscriptions", body: []byte(`{"url":"ftp://x"}`), chunked: true, header: map[string]string{"Content-Type": "application/json", "Authorization": "Bearer wrong"}},
		{method: http.MethodGet, path: "/v1/events/evt_missing"},
		{method: http.MethodGet, path: "/v1/events?limit=0"},
		{method: http.MethodGet, path: "/openapi.json"},
		{method: http.MethodGet, path: "/health"},
		{method: http.MethodGet, path: "/nowhere"},
		{method: http.MethodPut, path: "/v1/events"},
	} {
		tr.compare(t, r)
	}
}

// A request whose line and headers pass maxHeaderBytes is refused with
// 431; one just under it is served.
func TestFastHTTPServerBoundsTheHeaders(t *testing.T) {
	t.Parallel()
	tr := newTransports(t)
	for _, tc := range []struct {
		size int
		want int
	}{
		{maxHeaderBytes - 1024, http.StatusOK},
		{maxHeaderBytes, http.StatusRequestHeaderFieldsTooLarge},
	} {
		r := request{method: http.MethodGet, path: "/v1/subscriptions", header: map[string]string{"X-Padding": strings.Repeat("p", tc.size)}}
		if code, _, body := r.send(t, tr.fastURL); code != tc.want {
			t.Errorf("%d bytes of headers: %d %s, want %d", tc.size, code, body, tc.want)
		}
	}
}
