package loadtest

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
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
			w.Write([]byte("part one, "))
			w.(http.Flusher).Flush() // forces chunked encoding
			w.Write([]byte("part two"))
		case "/close":
			w.Header().Set("Connection", "close")
			w.Write(body)
		default:
			w.Write(body)
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
