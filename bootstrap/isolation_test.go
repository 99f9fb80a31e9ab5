package bootstrap_test

import (
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dispatch-webhooks/dispatch/bootstrap"
	"github.com/dispatch-webhooks/dispatch/client"
)

// TestAHangingEndpointCostsOnlyItsShareOfTheWorker: a subscription whose
// endpoint hangs until its timeout has far more deliveries queued than the
// worker has capacity, and holds what it may of the worker before a
// healthy subscription starts receiving 100 events/s; the healthy one's
// accepted→received p99 stays within 250 ms (SPEC §2, Isolation).
//
// Not parallel: it measures latency, which other deployments starting at
// the same time on the machine would blur.
func TestAHangingEndpointCostsOnlyItsShareOfTheWorker(t *testing.T) {
	const (
		capacity = 32
		hanging  = 4 * capacity
		rate     = 100 // healthy events per second
		healthyN = 3 * rate
		p99Limit = 250 * time.Millisecond
	)
	c := newCluster(t, func(cfg *bootstrap.Config) { cfg.WorkerConcurrency = capacity })
	rcv := newScripted(t)
	unhang := make(chan struct{})
	hang, hangURL := rcv.add("/hang", func(_ int, r *http.Request) (int, http.Header) {
		select {
		case <-r.Context().Done():
		case <-unhang:
		}
		return http.StatusOK, nil
	})
	healthy, healthyURL := rcv.add("/healthy", nil)
	many, timeout := int64(1000), "10s"
	c.subscribe(hangURL, "hang.event", client.SubscriptionInput{MaxInFlight: &many, RateLimit: &many, Timeout: &timeout})
	c.subscribe(healthyURL, "healthy.event", client.SubscriptionInput{MaxInFlight: &many, RateLimit: &many})

	publishAll := func(n int, typ string) {
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Go(func() {
				for i := w; i < n; i += 8 {
					c.publish(typ, fmt.Sprintf(`{"i":%d}`, i))
				}
			})
		}
		wg.Wait()
	}
	publishAll(hanging, "hang.event")
	c.start(bootstrap.RoleWorker)
	c.start(bootstrap.RoleScheduler)
	// Registered after the worker, so it runs before the worker stops:
	// the stop waits for the requests in flight.
	t.Cleanup(func() { close(unhang) })

	// The hanging endpoint holds what the worker lets it: every slot
	// before the fix, its share after.
	waitFor(t, 15*time.Second, "the hanging endpoint to hold half the worker", func() bool {
		return inFlight(hang) >= capacity/2
	})
	t.Logf("the hanging endpoint holds %d requests", inFlight(hang))

	var mu sync.Mutex
	accepted := make(map[string]time.Time, healthyN)
	var publishers sync.WaitGroup
	tick := time.NewTicker(time.Second / rate)
	for i := range healthyN {
		<-tick.C
		publishers.Go(func() {
			id := c.publish("healthy.event", fmt.Sprintf(`{"i":%d}`, i))
			at := time.Now()
			mu.Lock()
			accepted[id] = at
			mu.Unlock()
		})
	}
	tick.Stop()
	publishers.Wait()
	ids := make([]string, 0, len(accepted))
	for id := range accepted {
		ids = append(ids, id)
	}
	waitAllArrived(t, healthy, ids, 30*time.Second)

	var latencies []time.Duration
	seen := map[string]bool{}
	for _, a := range healthy.got() {
		if at, ok := accepted[a.webhookID]; ok && !seen[a.webhookID] {
			seen[a.webhookID] = true
			latencies = append(latencies, max(a.at.Sub(at), 0))
		}
	}
	slices.Sort(latencies)
	p50, p99 := latencies[len(latencies)/2], latencies[len(latencies)*99/100]
	t.Logf("healthy accepted→received over %d events: p50 %s, p99 %s, max %s; the hanging endpoint had %d requests",
		len(latencies), p50, p99, latencies[len(latencies)-1], len(hang.got()))
	if p99 > p99Limit {
		t.Errorf("healthy accepted→received p99 = %s with an endpoint hanging, want ≤ %s", p99, p99Limit)
	}
}

// inFlight is how many requests ep holds without having answered.
func inFlight(ep *endpoint) int {
	n := 0
	for _, a := range ep.got() {
		if a.status == 0 {
			n++
		}
	}
	return n
}
