package loadtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

func newSecret(t testing.TB) string {
	t.Helper()
	key := make([]byte, 24)
	_, _ = rand.Read(key)
	return "whsec_" + base64.StdEncoding.EncodeToString(key)
}

// webhook is a request as Dispatch sends it, signed with secret.
func signedRequest(t testing.TB, url, secret, id string, body []byte) *http.Request {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	sig, err := wh.Sign(id, now, body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Webhook-Id", id)
	req.Header.Set("Webhook-Timestamp", strconv.FormatInt(now.Unix(), 10))
	req.Header.Set("Webhook-Signature", sig)
	return req
}

func newTestReceiver(t *testing.T, subscriptions int, tune func(*Config)) (*Receiver, *acceptedLog) {
	t.Helper()
	cfg := DefaultConfig()
	if tune != nil {
		tune(&cfg)
	}
	accepted := newAcceptedLog()
	rcv, err := NewReceiver(subscriptions, cfg, accepted)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = rcv.Close(ctx)
		http.DefaultClient.CloseIdleConnections()
	})
	return rcv, accepted
}

func get(t testing.TB, url string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

func send(t *testing.T, req *http.Request) int {
	t.Helper()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	return res.StatusCode
}

func TestReceiverVerifiesCountsAndMeasures(t *testing.T) {
	t.Parallel()
	rcv, accepted := newTestReceiver(t, 2, nil)
	secrets := []string{newSecret(t), newSecret(t)}
	for i, s := range secrets {
		if err := rcv.SetSecret(i, s); err != nil {
			t.Fatal(err)
		}
	}
	body := []byte(`{"id":"evt_1","type":"load.test","data":{}}`)
	accepted.add("evt_1", time.Now().Add(-20*time.Millisecond))
	accepted.add("evt_2", time.Now())

	for _, tc := range []struct {
		name string
		req  *http.Request
		want int
	}{
		{"first delivery to subscription 0", signedRequest(t, rcv.URL(0), secrets[0], "evt_1", body), 200},
		{"same event to subscription 1", signedRequest(t, rcv.URL(1), secrets[1], "evt_1", body), 200},
		{"a duplicate", signedRequest(t, rcv.URL(0), secrets[0], "evt_1", body), 200},
		{"signed with the wrong secret", signedRequest(t, rcv.URL(1), secrets[0], "evt_2", body), 200},
		{"a path that is no subscription's", signedRequest(t, rcv.URL(2), secrets[0], "evt_2", body), 404},
		{"not a POST", get(t, rcv.URL(0)), 404},
	} {
		if got := send(t, tc.req); got != tc.want {
			t.Errorf("%s: status %d, want %d", tc.name, got, tc.want)
		}
	}
	check := func(name string, got, want int64) {
		t.Helper()
		if got != want {
			t.Errorf("%s = %d, want %d", name, got, want)
		}
	}
	check("requests", rcv.requests.Load(), 6)
	check("delivered pairs", rcv.delivered.Load(), 3)
	check("duplicates", rcv.duplicates.Load(), 1)
	check("unknown", rcv.unknown.Load(), 2)
	check("verified", rcv.verified.Load(), 4)
	check("bad signatures", rcv.badSignature.Load(), 1)
	if msg := rcv.firstBadSig.Load(); msg == nil || !bytes.Contains([]byte(*msg), []byte("evt_2")) {
		t.Errorf("first bad signature = %v, want it to name evt_2", msg)
	}
	w := rcv.takeWindow()
	if len(w) != 3 || w[0] < 20*time.Millisecond {
		t.Errorf("latency window = %v, want 3 latencies, the first ≥ 20ms", w)
	}
	if w := rcv.takeWindow(); len(w) != 0 {
		t.Errorf("second takeWindow = %v, want it emptied", w)
	}
}

func TestReceiverFailsTheConfiguredShareAndSamplesVerification(t *testing.T) {
	t.Parallel()
	rcv, _ := newTestReceiver(t, 1, func(c *Config) { c.ReceiverFailureRate, c.VerifySample = 1, 0 })
	secret := newSecret(t)
	if err := rcv.SetSecret(0, secret); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if got := send(t, signedRequest(t, rcv.URL(0), secret, fmt.Sprintf("evt_%d", i), []byte(`{}`))); got != 500 {
			t.Errorf("request %d: status %d, want 500", i, got)
		}
	}
	if got := rcv.failed.Load(); got != 3 {
		t.Errorf("failed = %d, want 3", got)
	}
	if got := rcv.delivered.Load(); got != 0 {
		t.Errorf("delivered = %d, want 0: a 500 is not a delivery", got)
	}
	if got := rcv.verified.Load(); got != 0 {
		t.Errorf("verified = %d with --verify-sample 0, want 0", got)
	}
	if got := len(rcv.snapshot()); got != 3 {
		t.Errorf("recorded %d requests, want 3 (failures count as attempts)", got)
	}
}

// BenchmarkVerify is the receiver's cost of checking one signature on a
// 1 KiB event, to compare with the ~19 µs a loopback HTTP exchange costs:
// verifying every request is cheap enough (a few µs) that the tool
// verifies all of them by default. "library" is the Standard Webhooks
// library's Verify, which signatureKey replaced in the receiver.
//
//	go test -run '^$' -bench BenchmarkVerify ./loadtest/
func BenchmarkVerify(b *testing.B) {
	secret := newSecret(b)
	body := bytes.Repeat([]byte("x"), 1100)
	req := signedRequest(b, "http://127.0.0.1/s/0", secret, "evt_01JD6Z7Q2M3N4P5Q6R7S8T9V0W", body)
	b.Run("receiver", func(b *testing.B) {
		key, err := newSignatureKey(secret)
		if err != nil {
			b.Fatal(err)
		}
		id, ts, sig := []byte(req.Header.Get("Webhook-Id")), []byte(req.Header.Get("Webhook-Timestamp")), []byte(req.Header.Get("Webhook-Signature"))
		b.ReportAllocs()
		for b.Loop() {
			if err := key.verify(id, ts, sig, body, time.Now()); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("library", func(b *testing.B) {
		wh, err := standardwebhooks.NewWebhook(secret)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if err := wh.Verify(body, req.Header); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestReceiverLetsGoOfItsRecordsOnClose: Close forgets the run's arrivals
// and accepted events (the server, and so the receiver, outlive Close by
// seconds), and an arrival recorded after it is dropped, not a panic.
func TestReceiverLetsGoOfItsRecordsOnClose(t *testing.T) {
	t.Parallel()
	rcv, accepted := newTestReceiver(t, 1, nil)
	now := time.Now()
	accepted.add("evt_1", now)
	rcv.record(arrival{eventID: "evt_1", at: now, ok: true})
	if rcv.delivered.Load() != 1 {
		t.Fatalf("delivered %d before Close, want 1", rcv.delivered.Load())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rcv.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := accepted.get("evt_1"); ok {
		t.Error("the accepted event is still known after Close")
	}
	rcv.mu.Lock()
	held := len(rcv.arrivals) + len(rcv.firsts)
	rcv.mu.Unlock()
	if held != 0 {
		t.Errorf("%d arrivals and pairs held after Close, want none", held)
	}
	rcv.record(arrival{eventID: "evt_2", at: now, ok: true})
	if rcv.delivered.Load() != 1 {
		t.Errorf("delivered %d after an arrival past Close, want it dropped", rcv.delivered.Load())
	}
}
