package bootstrap_test

import (
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/dispatch-webhooks/dispatch/bootstrap"
	"github.com/dispatch-webhooks/dispatch/client"
)

// TestSecretRotationOverlap: after a rotation, every webhook verifies with
// either secret (Standard Webhooks library) until the overlap ends; after
// it, only with the new one.
func TestSecretRotationOverlap(t *testing.T) {
	t.Parallel()
	const overlap = 2 * time.Second
	c := newCluster(t, func(cfg *bootstrap.Config) { cfg.SecretRotationOverlap = overlap })
	c.start(bootstrap.RoleWorker)
	c.start(bootstrap.RoleScheduler)

	var mu sync.Mutex
	var bodies [][]byte
	var headers []http.Header
	rcv := newScripted(t)
	ep, url := rcv.add("/rotating", func(_ int, r *http.Request) (int, http.Header) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies, headers = append(bodies, b), append(headers, r.Header.Clone())
		mu.Unlock()
		return http.StatusOK, nil
	})
	subID, first := c.subscribe(url, "rotating.event", client.SubscriptionInput{})

	const what = "rotate secret"
	res, err := c.api.RotateSubscriptionSecretWithResponse(t.Context(), subID, client.RotateSubscriptionSecretJSONRequestBody{})
	rotated := body(t, what, expect(t, what, res, err, http.StatusOK).JSON200)
	second := rotated.Secret
	if second == first || rotated.PreviousSecretExpiresAt == nil {
		t.Fatalf("rotation answered %+v, want a new secret and when the old one stops signing", rotated)
	}
	expires := *rotated.PreviousSecretExpiresAt

	during := c.publish("rotating.event", `{"when":"during"}`)
	waitAllArrived(t, ep, []string{during}, 15*time.Second)
	waitFor(t, 2*overlap, "the overlap to end", func() bool { return time.Now().After(expires) })
	after := c.publish("rotating.event", `{"when":"after"}`)
	waitAllArrived(t, ep, []string{during, after}, 15*time.Second)

	verifies := func(secret string, i int) bool {
		mu.Lock()
		defer mu.Unlock()
		wh, err := standardwebhooks.NewWebhook(secret)
		if err != nil {
			t.Fatal(err)
		}
		return wh.Verify(bodies[i], headers[i]) == nil
	}
	if !verifies(first, 0) || !verifies(second, 0) {
		t.Errorf("during the overlap: verifies with old=%v new=%v, want both", verifies(first, 0), verifies(second, 0))
	}
	if verifies(first, 1) || !verifies(second, 1) {
		t.Errorf("after the overlap: verifies with old=%v new=%v, want only the new", verifies(first, 1), verifies(second, 1))
	}
}
