package loadtest

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-webhooks/dispatch/domain"
)

// The floor's relay answers a publish 202 and sends its webhook, signed
// so that a Standard Webhooks verifier accepts it: the relay does the
// work a delivery's two HTTP exchanges do, or the floor would be too low.
func TestFloorRelaySendsEachPublishSigned(t *testing.T) {
	t.Parallel()
	type hook struct {
		header http.Header
		body   []byte
	}
	hooks := make(chan hook, 1)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		hooks <- hook{r.Header.Clone(), body}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer receiver.Close()
	relay := httptest.NewServer(newFloorRelay(receiver.URL+"/hook", nil))
	defer relay.Close()

	if code := floorPublish(t, relay.URL, `{"type":"order.created","source":"shop","data":{"n":1}}`); code != http.StatusAccepted {
		t.Fatalf("publish answered %d, want 202", code)
	}
	var got hook
	select {
	case got = <-hooks:
	case <-time.After(10 * time.Second):
		t.Fatal("no webhook within 10s")
	}
	if !strings.Contains(string(got.body), `"data":{"n":1}`) || !strings.Contains(string(got.body), `"type":"order.created"`) {
		t.Errorf("webhook body %s lacks the event", got.body)
	}
	err := domain.Verify([]domain.Secret{floorRelaySecret}, got.header.Get("webhook-id"), got.header.Get("webhook-timestamp"),
		got.body, got.header.Get("webhook-signature"), time.Now(), time.Minute)
	if err != nil {
		t.Errorf("signature does not verify: %v", err)
	}

	if code := floorPublish(t, relay.URL, `{"type":`); code != http.StatusBadRequest {
		t.Errorf("a publish that is not JSON answered %d, want 400", code)
	}
}

// The durable floor's relay commits the event before its 202 and the
// attempt once the endpoint answered, on a database of its own that the
// floor drops; the floor counts that database's backends as PostgreSQL.
func TestDurableFloorRelayCommitsEventAndAttempt(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db, err := newFloorDatabase(ctx, serverURL())
	if err != nil {
		t.Fatal(err)
	}
	defer db.drop()
	store, err := openFloorStore(ctx, db.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer store.close()
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer receiver.Close()
	relayHandler := newFloorRelay(receiver.URL+"/hook", store)
	relay := httptest.NewServer(relayHandler)
	defer relay.Close()

	if code := floorPublish(t, relay.URL, `{"type":"order.created","source":"shop","data":{"n":1}}`); code != http.StatusAccepted {
		t.Fatalf("publish answered %d, want 202", code)
	}
	var data string
	if err := store.pool.QueryRow(ctx, `SELECT data::text FROM floor_events`).Scan(&data); err != nil || data != `{"n": 1}` {
		t.Fatalf("event stored before the 202: %q, %v; want its data", data, err)
	}
	relayHandler.wait()
	var code int
	if err := store.pool.QueryRow(ctx, `SELECT status_code FROM floor_attempts`).Scan(&code); err != nil || code != http.StatusNoContent {
		t.Errorf("attempt recorded with %d, %v; want 204", code, err)
	}
	pids, err := db.pids(ctx)
	if err != nil || len(pids) < 2 {
		t.Errorf("PostgreSQL processes %v, %v; want the relay's backend and the server's own", pids, err)
	}
}

// Bad flags are refused before anything starts.
func TestFloorRefusesBadFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--rates", "0"}, {"--rates", "ten"}, {"--duration", "10ms"}, {"--durable", "--database-url", "mysql://x"}} {
		var stderr bytes.Buffer
		if code := floorMain(context.Background(), args, io.Discard, &stderr); code != 2 {
			t.Errorf("floor %q exited %d, want 2 (%s)", args, code, stderr.String())
		}
	}
}

// floorPublish posts body to the relay at url and returns the status.
func floorPublish(t *testing.T, url, body string) int {
	t.Helper()
	resp, err := http.Post(url+"/v1/events", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}
