package bootstrap_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"

	"github.com/dispatch-webhooks/dispatch/bootstrap"
	"github.com/dispatch-webhooks/dispatch/client"
)

// TestFanOutHeldBackDeliversEverything runs the fan-out stage against a
// worker far slower than it, with a tiny DISPATCH_FANOUT_MAX_UNREAD: the
// stage waits for the worker (and says so in its metric), and every event
// still arrives once.
//
// Not parallel: a whole deployment more at the package's peak would only
// add to the PostgreSQL connections the parallel tests share.
func TestFanOutHeldBackDeliversEverything(t *testing.T) {
	c := newCluster(t, func(cfg *bootstrap.Config) {
		cfg.InlineFanOutMax = 0 // every event through the fan-out stage
		cfg.FanOutMaxUnread = 5
		cfg.WorkerConcurrency = 4
	})
	rcv := newScripted(t)
	ep, url := rcv.add("/held", takesAMoment(2*time.Millisecond))
	c.subscribe(url, "held.event", client.SubscriptionInput{})

	// Published before the worker starts, so that its first fan-out batch
	// (100 events) leaves the second one waiting however fast the machine.
	const n = 300
	ids := make([]string, n)
	for i := range ids {
		ids[i] = c.publish("held.event", fmt.Sprintf(`{"i":%d}`, i))
	}
	var reg *prometheus.Registry
	c.start(bootstrap.RoleWorker, fx.Populate(&reg))
	c.start(bootstrap.RoleScheduler)
	waitAllArrived(t, ep, ids, 30*time.Second)

	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "dispatch_fanout_held_seconds_total" {
			if held := f.GetMetric()[0].GetCounter().GetValue(); held <= 0 {
				t.Errorf("fan-out held %v s, want it to have waited for the worker", held)
			}
			return
		}
	}
	t.Fatal("dispatch_fanout_held_seconds_total not exported by the worker")
}
