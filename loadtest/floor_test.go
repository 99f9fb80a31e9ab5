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
	relay := httptest.NewServer(newFloorRelay(receiver.URL + "/hook"))
	defer relay.Close()

	resp, err := http.Post(relay.URL+"/v1/events", "application/json",
		bytes.NewReader([]byte(`{"type":"order.created","source":"shop","data":{"n":1}}`)))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("publish answered %d, want 202", resp.StatusCode)
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
	err = domain.Verify([]domain.Secret{floorRelaySecret}, got.header.Get("webhook-id"), got.header.Get("webhook-timestamp"),
		got.body, got.header.Get("webhook-signature"), time.Now(), time.Minute)
	if err != nil {
		t.Errorf("signature does not verify: %v", err)
	}

	resp, err = http.Post(relay.URL+"/v1/events", "application/json", strings.NewReader(`{"type":`))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a publish that is not JSON answered %d, want 400", resp.StatusCode)
	}
}

// Bad flags are refused before anything starts.
func TestFloorRefusesBadFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--rates", "0"}, {"--rates", "ten"}, {"--duration", "10ms"}} {
		var stderr bytes.Buffer
		if code := floorMain(context.Background(), args, io.Discard, &stderr); code != 2 {
			t.Errorf("floor %q exited %d, want 2 (%s)", args, code, stderr.String())
		}
	}
}
