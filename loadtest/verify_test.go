package loadtest

import (
	"bytes"
	"crypto/rand"
	"net/http"
	"strconv"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// TestSignatureKeyAgreesWithTheLibrary checks the receiver's verifier
// against the Standard Webhooks library's Verify: on every case, both
// accept or both refuse.
func TestSignatureKeyAgreesWithTheLibrary(t *testing.T) {
	secret, other := newSecret(t), newSecret(t)
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	otherWH, err := standardwebhooks.NewWebhook(other)
	if err != nil {
		t.Fatal(err)
	}
	key, err := newSignatureKey(secret)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	body := []byte(`{"id":"evt_1","type":"invoice.paid","data":{"n":1}}`)
	sign := func(w *standardwebhooks.Webhook, id string, at time.Time, b []byte) string {
		sig, err := w.Sign(id, at, b)
		if err != nil {
			t.Fatal(err)
		}
		return sig
	}
	good := sign(wh, "evt_1", now, body)
	unix := strconv.FormatInt(now.Unix(), 10)
	cases := []struct {
		name         string
		id, ts, sigs string
		body         []byte
		accept       bool
	}{
		{"signed", "evt_1", unix, good, body, true},
		{"another body", "evt_1", unix, good, []byte(`{"id":"evt_1"}`), false},
		{"another id", "evt_2", unix, good, body, false},
		{"another timestamp", "evt_1", strconv.FormatInt(now.Unix()-1, 10), good, body, false},
		{"another secret", "evt_1", unix, sign(otherWH, "evt_1", now, body), body, false},
		{"the second of two", "evt_1", unix, sign(otherWH, "evt_1", now, body) + " " + good, body, true},
		{"the first of two", "evt_1", unix, good + " " + sign(otherWH, "evt_1", now, body), body, true},
		{"a v2 entry", "evt_1", unix, "v2," + good[len("v1,"):], body, false},
		{"no version", "evt_1", unix, good[len("v1,"):], body, false},
		{"a third part", "evt_1", unix, good + ",extra", body, true},
		{"a cut signature", "evt_1", unix, good[:len(good)-1], body, false},
		{"no id", "", unix, good, body, false},
		{"no timestamp", "evt_1", "", good, body, false},
		{"no signature", "evt_1", unix, "", body, false},
		{"a timestamp not a number", "evt_1", "now", good, body, false},
		{"a timestamp with a sign", "evt_1", "+" + unix, good, body, true},
		{"six minutes old", "evt_1", strconv.FormatInt(now.Add(-6*time.Minute).Unix(), 10), sign(wh, "evt_1", now.Add(-6*time.Minute), body), body, false},
		{"four minutes old", "evt_1", strconv.FormatInt(now.Add(-4*time.Minute).Unix(), 10), sign(wh, "evt_1", now.Add(-4*time.Minute), body), body, true},
		{"six minutes ahead", "evt_1", strconv.FormatInt(now.Add(6*time.Minute).Unix(), 10), sign(wh, "evt_1", now.Add(6*time.Minute), body), body, false},
		{"four minutes ahead", "evt_1", strconv.FormatInt(now.Add(4*time.Minute).Unix(), 10), sign(wh, "evt_1", now.Add(4*time.Minute), body), body, true},
		{"an empty body", "evt_1", unix, sign(wh, "evt_1", now, nil), nil, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := http.Header{}
			h.Set("Webhook-Id", c.id)
			h.Set("Webhook-Timestamp", c.ts)
			h.Set("Webhook-Signature", c.sigs)
			libErr := wh.Verify(c.body, h)
			ourErr := key.verify([]byte(c.id), []byte(c.ts), []byte(c.sigs), c.body, time.Now())
			if (libErr == nil) != c.accept {
				t.Fatalf("the library: %v, want accepted = %t (the case is wrong)", libErr, c.accept)
			}
			if (ourErr == nil) != c.accept {
				t.Errorf("verify: %v, want accepted = %t as the library", ourErr, c.accept)
			}
		})
	}

	// Random bodies and ids, signed by the library, each also tampered.
	for range 200 {
		b := make([]byte, 1+int(randByte())*4)
		_, _ = rand.Read(b)
		id := "evt_" + strconv.Itoa(int(randByte()))
		sig := sign(wh, id, now, b)
		if err := key.verify([]byte(id), []byte(unix), []byte(sig), b, now); err != nil {
			t.Fatalf("a body of %d random bytes: %v", len(b), err)
		}
		tampered := bytes.Clone(b)
		tampered[int(randByte())%len(tampered)] ^= 1
		if err := key.verify([]byte(id), []byte(unix), []byte(sig), tampered, now); err == nil {
			t.Fatalf("a body of %d random bytes with one bit flipped was accepted", len(b))
		}
	}
}

func randByte() byte {
	var b [1]byte
	_, _ = rand.Read(b[:])
	return b[0]
}

func TestSignatureKeyRefusesASecretNotBase64(t *testing.T) {
	if _, err := newSignatureKey("whsec_not base64!"); err == nil {
		t.Error("newSignatureKey accepted a secret that is not base64")
	}
}
