package loadtest

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

func TestEventIDReadsTheIDMember(t *testing.T) {
	t.Parallel()
	tests := []struct {
		answer, want string
		ok           bool
	}{
		{`{"$schema":"http://x/schemas/Event.json","id":"evt_1","data":{"id":"no"}}`, "evt_1", true},
		{`{"data":{"id":"nested"},"id":"evt_2"}`, "evt_2", true},
		{`{"id":"evt_\u0033"}`, "evt_3", true},
		{`{"$schema":"http://x/a\"b","id":"evt_5"}`, "evt_5", true},
		{`{"$schema":"http://x","data":{"id":"no"},"id":"evt_6"}`, "evt_6", true},
		{`{"id":""}`, "", true},
		{`{"data":{"id":"nested"}}`, "", false},
		{`["id","evt_4"]`, "", false},
		{`{"id":4}`, "", false},
		{`{"a":`, "", false},
		{``, "", false},
	}
	for _, tt := range tests {
		got, err := eventID([]byte(tt.answer))
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("eventID(%s) = %q, %v; want %q, ok %v", tt.answer, got, err, tt.want, tt.ok)
		}
	}
}

// TestConnectOpensAConnectionPerPublisher checks that Connect leaves n
// connections open in the pool: the server holds each /health request
// until all n have arrived, so they need n connections, and the publishes
// that follow dial none.
func TestConnectOpensAConnectionPerPublisher(t *testing.T) {
	t.Parallel()
	const n = 8
	var dials, arrived atomic.Int64
	all := make(chan struct{})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			if arrived.Add(1) == n {
				close(all)
			}
			<-all
			_, _ = w.Write([]byte(`{"status":"ok"}`))
			return
		}
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write([]byte(`{"id":"evt_1"}`))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			dials.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	api, err := newClientAPI(srv.URL, "key", n)
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()

	if err := api.Connect(t.Context(), n); err != nil {
		t.Fatalf("Connect: %v", err)
	}
	if got := dials.Load(); got != n {
		t.Fatalf("Connect opened %d connections, want %d", got, n)
	}
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			if _, err := api.Publish(t.Context(), []byte(`{}`)); err != nil {
				t.Errorf("publish: %v", err)
			}
		})
	}
	wg.Wait()
	if got := dials.Load(); got != n {
		t.Fatalf("%d connections after the publishes, want the %d Connect opened", got, n)
	}
}

// TestConnectReportsAnUnhealthyAPI drives Connect's failure path.
func TestConnectReportsAnUnhealthyAPI(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	api, err := newClientAPI(srv.URL, "key", 2)
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	if err := api.Connect(t.Context(), 2); err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("Connect = %v, want an error naming the 503", err)
	}
}
