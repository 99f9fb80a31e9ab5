package httpapi

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// testKey is the API key of the package's own tests.
const testKey = "test-key-1-0123456789abcdefghijklmnop"

// request is one request to send. A chunked body is sent without a length.
type request struct {
	method, path string
	body         []byte
	chunked      bool
	header       map[string]string
}

// send sends r to base with the test key (unless r's header sets
// Authorization itself) and returns its answer with any "id" in the body
// replaced, and the server's address (in schema links) too.
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
	var ev struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(raw, &ev) == nil && ev.ID != "" {
		out = strings.ReplaceAll(out, ev.ID, "ID")
	}
	return resp.StatusCode, resp.Header, out
}

// A request whose line and headers are well over maxHeaderBytes is refused
// with 431 (net/http counts loosely: 4 KiB of slack, more on a reused
// connection); one under it is served.
func TestServerBoundsTheHeaders(t *testing.T) {
	t.Parallel()
	base, _ := loggedServer(t)
	for _, tc := range []struct {
		size int
		want int
	}{
		{maxHeaderBytes - 1024, http.StatusOK},
		{4 * maxHeaderBytes, http.StatusRequestHeaderFieldsTooLarge},
	} {
		r := request{method: http.MethodGet, path: "/v1/subscriptions", header: map[string]string{"X-Padding": strings.Repeat("p", tc.size)}}
		if code, _, body := r.send(t, base); code != tc.want {
			t.Errorf("%d bytes of headers: %d %s, want %d", tc.size, code, body, tc.want)
		}
	}
}

// A body over its route's limit is refused 413 with a problem, declared or
// chunked, whether or not the route reads bodies; without the key, a /v1
// route answers 401 first. A chunked body within the limit is served.
func TestServerBoundsTheBodies(t *testing.T) {
	t.Parallel()
	base, _ := loggedServer(t)
	big := []byte(`{"url":"` + strings.Repeat("x", DefaultMaxBodyBytes) + `"}`)
	event := []byte(`{"type":"a","source":"s","data":{"x":"` + strings.Repeat("x", DefaultMaxEventBytes) + `"}}`)
	json := map[string]string{"Content-Type": "application/json"}
	noKey := map[string]string{"Content-Type": "application/json", "Authorization": ""}
	for _, tc := range []struct {
		r    request
		want int
	}{
		{request{method: http.MethodPost, path: "/v1/subscriptions", body: big, header: json}, http.StatusRequestEntityTooLarge},
		{request{method: http.MethodPost, path: "/v1/subscriptions", body: big, chunked: true, header: json}, http.StatusRequestEntityTooLarge},
		{request{method: http.MethodPost, path: "/v1/subscriptions", body: big, chunked: true, header: noKey}, http.StatusUnauthorized},
		{request{method: http.MethodPost, path: "/v1/events", body: event, header: json}, http.StatusRequestEntityTooLarge},
		{request{method: http.MethodPost, path: "/v1/events", body: event, chunked: true, header: json}, http.StatusRequestEntityTooLarge},
		{request{method: http.MethodPost, path: "/v1/events", body: event, chunked: true, header: noKey}, http.StatusUnauthorized},
		{request{method: http.MethodGet, path: "/health", body: big, chunked: true}, http.StatusRequestEntityTooLarge},
		{request{method: http.MethodGet, path: "/health", body: big}, http.StatusRequestEntityTooLarge},
		{request{method: http.MethodPost, path: "/v1/events", body: []byte(`{"type":"a","source":"s","data":{}}`), chunked: true, header: json}, http.StatusAccepted},
		{request{method: http.MethodGet, path: "/health", body: []byte("{}"), chunked: true}, http.StatusOK},
	} {
		code, header, body := tc.r.send(t, base)
		if code != tc.want {
			t.Errorf("%s %s (chunked %v, %v): %d %s, want %d", tc.r.method, tc.r.path, tc.r.chunked, tc.r.header, code, body, tc.want)
		}
		if code >= 400 && header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s %s (chunked %v): Content-Type %q, want a problem", tc.r.method, tc.r.path, tc.r.chunked, header.Get("Content-Type"))
		}
	}
}
