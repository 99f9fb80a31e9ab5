package loadtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestKeepAliveDoerReusesConnections(t *testing.T) {
	t.Parallel()
	var dials atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		switch r.URL.Path {
		case "/chunked":
			_, _ = w.Write([]byte("part one, "))
			w.(http.Flusher).Flush() // forces chunked encoding
			_, _ = w.Write([]byte("part two"))
		case "/close":
			w.Header().Set("Connection", "close")
			_, _ = w.Write(body)
		default:
			_, _ = w.Write(body)
		}
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			dials.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	d := newKeepAliveDoer(strings.TrimPrefix(srv.URL, "http://"), 5*time.Second)
	defer d.Close()

	send := func(path, body string) string {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		res, err := d.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		got, _ := io.ReadAll(res.Body)
		return string(got)
	}
	for i := range 3 {
		if got := send("/echo", "hello"); got != "hello" {
			t.Fatalf("request %d answered %q", i, got)
		}
	}
	if got := send("/chunked", ""); got != "part one, part two" {
		t.Fatalf("chunked answer %q", got)
	}
	if n := dials.Load(); n != 1 {
		t.Fatalf("%d connections for 4 sequential requests, want 1", n)
	}
	if got := send("/close", "bye"); got != "bye" {
		t.Fatalf("answer %q", got)
	}
	if got := send("/echo", "again"); got != "again" {
		t.Fatalf("answer %q", got)
	}
	if n := dials.Load(); n != 2 {
		t.Fatalf("%d connections, want a new one after the server closed the first", n)
	}
	d.mu.Lock()
	for _, c := range d.idle {
		c.idleSince = time.Now().Add(-maxIdle - time.Second)
	}
	d.mu.Unlock()
	if got := send("/echo", "later"); got != "later" {
		t.Fatalf("answer %q", got)
	}
	if n := dials.Load(); n != 3 {
		t.Fatalf("%d connections, want a new one instead of one idle for over %v", n, maxIdle)
	}
}

func TestKeepAliveDoerStopsWhenTheContextEnds(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
	}))
	defer srv.Close()
	defer close(release)
	d := newKeepAliveDoer(strings.TrimPrefix(srv.URL, "http://"), time.Minute)
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = d.Do(req)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the context's deadline", err)
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Fatalf("returned after %v, not when the context ended", waited)
	}
}

func TestKeepAliveDoerWritesRequestsAsNetHTTPDoes(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Add("X-Seen", r.Method+" "+r.URL.RequestURI())
		w.Header().Add("X-Seen", fmt.Sprintf("length %d %q", r.ContentLength, r.TransferEncoding))
		w.Header().Add("X-Seen", "key "+r.Header.Get("Idempotency-Key")+", agent "+r.UserAgent())
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write(body)
	}))
	defer srv.Close()
	d := newKeepAliveDoer(strings.TrimPrefix(srv.URL, "http://"), 5*time.Second)
	defer d.Close()

	unknownLength := io.MultiReader(strings.NewReader("stre"), strings.NewReader("amed"))
	for _, tc := range []struct {
		method, path string
		body         io.Reader
		want         []string
		wantBody     string
	}{
		{http.MethodGet, "/v1/subscriptions?limit=5", nil,
			[]string{"GET /v1/subscriptions?limit=5", `length 0 []`, "key k1, agent Go-http-client/1.1"}, ""},
		{http.MethodPost, "/v1/events", strings.NewReader(`{"a":1}`),
			[]string{"POST /v1/events", `length 7 []`, "key k1, agent Go-http-client/1.1"}, `{"a":1}`},
		{http.MethodPost, "/v1/subscriptions/x/rotate-secret", nil,
			[]string{"POST /v1/subscriptions/x/rotate-secret", `length 0 []`, "key k1, agent Go-http-client/1.1"}, ""},
		{http.MethodPut, "/streamed", unknownLength, // net/http's own writer: chunked
			[]string{"PUT /streamed", `length -1 ["chunked"]`, "key k1, agent Go-http-client/1.1"}, "streamed"},
	} {
		req, err := http.NewRequest(tc.method, srv.URL+tc.path, tc.body)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Idempotency-Key", "k1")
		res, err := d.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", tc.method, tc.path, err)
		}
		body, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusAccepted || res.Status != "202 Accepted" || string(body) != tc.wantBody ||
			res.ContentLength != int64(len(tc.wantBody)) || !slices.Equal(res.Header.Values("X-Seen"), tc.want) {
			t.Errorf("%s %s: %q %q (length %d), X-Seen %q; want %q, X-Seen %q",
				tc.method, tc.path, res.Status, body, res.ContentLength, res.Header.Values("X-Seen"), tc.wantBody, tc.want)
		}
	}

	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/events", strings.NewReader("{}"))
	req.Header.Set("Idempotency-Key", "k1\r\nX-Injected: yes")
	if _, err := d.Do(req); err == nil || !strings.Contains(err.Error(), "line break") {
		t.Fatalf("a header value with a line break: err = %v, want it refused", err)
	}
}
