package bootstrap_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/dispatch-webhooks/dispatch/bootstrap"
	"github.com/dispatch-webhooks/dispatch/client"
)

// TestOrderedDeliveryPerKey: with ordering_key /data/customer_id, customer
// A's events arrive in publish order although its first one fails twice,
// and customer B's are not held behind A's retries; two workers share the
// work.
func TestOrderedDeliveryPerKey(t *testing.T) {
	t.Parallel()
	c := newCluster(t, nil)
	c.start(bootstrap.RoleWorker)
	c.start(bootstrap.RoleWorker)
	c.start(bootstrap.RoleScheduler)
	rcv := newScripted(t)
	var mu sync.Mutex
	var order []string // "A:0", "B:3", … in the order they were accepted
	failsLeft := 2
	_, url := rcv.add("/ordered", func(_ int, r *http.Request) (int, http.Header) {
		var webhook struct {
			Data struct {
				Tag string `json:"tag"`
			} `json:"data"`
		}
		if err := json.NewDecoder(r.Body).Decode(&webhook); err != nil {
			t.Errorf("webhook body: %v", err)
		}
		mu.Lock()
		defer mu.Unlock()
		if webhook.Data.Tag == "A:0" && failsLeft > 0 {
			failsLeft--
			return http.StatusServiceUnavailable, nil
		}
		order = append(order, webhook.Data.Tag)
		return http.StatusOK, nil
	})
	c.subscribe(url, "ordered.event", client.SubscriptionInput{OrderingKey: new("/data/customer_id"),
		// A:0 fails twice, 2 s (±10 %) apart: customer B's ten deliveries,
		// one at a time, have over 3.5 s to go through meanwhile, time
		// enough on a machine busy with the rest of the suite.
		RetryPolicy: &client.RetryPolicy{InitialInterval: new("2s"), Multiplier: new(1.0), MaxAttempts: new(int64(5))}})

	var ids []string
	for i := range 10 {
		for _, customer := range []string{"A", "B"} {
			ids = append(ids, c.publish("ordered.event", fmt.Sprintf(`{"customer_id":%q,"seq":%d,"tag":"%s:%d"}`, customer, i, customer, i)))
		}
	}
	for _, id := range ids {
		c.waitEvent(id, "delivered", 30*time.Second)
	}
	mu.Lock()
	defer mu.Unlock()
	var a, b []string
	lastB, firstA := -1, -1
	for i, o := range order {
		if o[0] == 'A' {
			a = append(a, o)
			if firstA < 0 {
				firstA = i
			}
		} else {
			b = append(b, o)
			lastB = i
		}
	}
	for i := range 10 {
		if a[i] != fmt.Sprintf("A:%d", i) || b[i] != fmt.Sprintf("B:%d", i) {
			t.Fatalf("deliveries out of order: A %v, B %v", a, b)
		}
	}
	if lastB > firstA { // A:0 is retried twice, 2 s apart: B has long finished
		t.Logf("arrival order: %v", order)
		t.Errorf("customer B's events waited behind customer A's retries")
	}
}
