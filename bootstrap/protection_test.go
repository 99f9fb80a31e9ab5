package bootstrap_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/fx"

	"github.com/dispatch-webhooks/dispatch/adapters/redis"
	"github.com/dispatch-webhooks/dispatch/bootstrap"
	"github.com/dispatch-webhooks/dispatch/client"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// TestCircuitBreakerStopsAndProbes: an endpoint that always fails opens
// the circuit after 5 failures; while open it sees nothing and attempts do
// not grow; half-open lets at most 3 probes through; once it recovers, a
// probe closes the circuit and everything is delivered.
func TestCircuitBreakerStopsAndProbes(t *testing.T) {
	t.Parallel()
	const open = 1500 * time.Millisecond
	c := newCluster(t, func(cfg *bootstrap.Config) {
		cfg.BreakerFailureThreshold, cfg.BreakerOpenDuration, cfg.BreakerHalfOpenProbes = 5, open, 3
	})
	c.start(bootstrap.RoleWorker)
	c.start(bootstrap.RoleScheduler)
	rcv := newScripted(t)
	var healthy atomic.Bool
	ep, url := rcv.add("/unwell", func(int, *http.Request) (int, http.Header) {
		if healthy.Load() {
			return http.StatusOK, nil
		}
		return http.StatusInternalServerError, nil
	})
	subID, _ := c.subscribe(url, "unwell.event", client.SubscriptionInput{
		RetryPolicy: &client.RetryPolicy{InitialInterval: new("50ms"), Multiplier: new(1.0), MaxAttempts: new(int64(50))}})

	first := c.publish("unwell.event", `{"n":0}`)
	waitFor(t, 10*time.Second, "5 failed attempts", func() bool { return len(ep.got()) >= 5 })

	// While the circuit is open, new events are postponed without attempts.
	var later []string
	for i := 1; i <= 9; i++ {
		later = append(later, c.publish("unwell.event", fmt.Sprintf(`{"n":%d}`, i)))
	}
	waitFor(t, 10*time.Second, "the new deliveries to be postponed by the open circuit", func() bool {
		res, err := c.api.ListDeliveriesWithResponse(t.Context(), &client.ListDeliveriesParams{SubscriptionId: &subID, Limit: new(int64(100))})
		list := body(t, "list deliveries", expect(t, "list deliveries", res, err, http.StatusOK).JSON200)
		postponed := 0
		for _, d := range deref(list.Data) {
			if d.EventId != first && d.Reason != nil && *d.Reason == "circuit_open" {
				postponed++
				if d.Attempts != 0 {
					t.Fatalf("delivery %s made %d attempts while the circuit was open", d.Id, d.Attempts)
				}
			}
		}
		return postponed == len(later)
	})

	// Wait for the first half-open window to pass, then recover.
	waitFor(t, 10*time.Second, "a probe after the open period", func() bool { return len(ep.got()) > 5 })
	time.Sleep(open / 3) // let the probe window play out before judging it
	healthy.Store(true)
	for _, id := range append([]string{first}, later...) {
		c.waitEvent(id, "delivered", 20*time.Second)
	}

	got := ep.got()
	if gap := got[5].at.Sub(got[4].at); gap < open {
		t.Errorf("the endpoint was called %s after the 5th failure, want no call for the open period (%s)", gap, open)
	}
	// The first half-open window: probes are the calls that came within
	// a fraction of the open period after it ended.
	probes := 0
	for _, a := range got[5:] {
		if a.at.Sub(got[5].at) < open/3 {
			probes++
		}
	}
	if probes > 3 {
		t.Errorf("half-open circuit let %d requests through, want at most 3", probes)
	}
	total := 0
	for _, id := range append([]string{first}, later...) {
		total += len(c.attempts(id))
	}
	if total != len(got) {
		t.Errorf("%d attempts recorded for %d requests: postponements must not count as attempts", total, len(got))
	}
}

// TestRateLimitHoldsAcrossWorkerProcesses: 200 events at rate_limit 20 and
// two worker processes; no 1-second window at the endpoint holds more than
// 20 plus the burst of 2 (plus a burst for leases and delivery jitter), and
// everything arrives.
func TestRateLimitHoldsAcrossWorkerProcesses(t *testing.T) {
	t.Parallel()
	c := newCluster(t, nil)
	c.start(bootstrap.RoleScheduler)
	c.startProcess(bootstrap.RoleWorker)
	c.startProcess(bootstrap.RoleWorker)
	rcv := newScripted(t)
	ep, url := rcv.add("/limited", nil)
	c.subscribe(url, "limited.event", client.SubscriptionInput{RateLimit: new(int64(20))})
	var ids []string
	for i := range 200 {
		ids = append(ids, c.publish("limited.event", fmt.Sprintf(`{"i":%d}`, i)))
	}
	waitAllArrived(t, ep, ids, 60*time.Second)
	got := ep.got()
	times := make([]time.Time, len(got))
	for i, a := range got {
		times[i] = a.at
	}
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	worst := 0
	for i := range times {
		j := i
		for j < len(times) && times[j].Sub(times[i]) < time.Second {
			j++
		}
		worst = max(worst, j-i)
	}
	t.Logf("busiest 1-second window held %d requests; all %d took %s", worst, len(times), times[len(times)-1].Sub(times[0]))
	// The limiter admits at most 20 + burst 2 in any second; a request
	// reaches the endpoint a few milliseconds after it was admitted, or, when
	// leased, up to a lease's window (100 ms) after it was taken: that
	// spread can carry up to a burst more into a window here.
	if worst > 20+2+2 {
		t.Errorf("a 1-second window held %d requests, want at most 20 + burst 2 (+2 for leases and delivery jitter)", worst)
	}
}

// concurrencyProbe is an endpoint that takes a while and records the most
// requests it ever had in flight at once.
type concurrencyProbe struct {
	inFlight, peak atomic.Int32
	hold           time.Duration
}

func (p *concurrencyProbe) script(int, *http.Request) (int, http.Header) {
	n := p.inFlight.Add(1)
	defer p.inFlight.Add(-1)
	for {
		old := p.peak.Load()
		if n <= old || p.peak.CompareAndSwap(old, n) {
			break
		}
	}
	time.Sleep(p.hold) // the endpoint's own latency
	return http.StatusOK, nil
}

// TestConcurrencyCapAcrossWorkerProcesses: max_in_flight 3, an endpoint
// taking 300 ms, two worker processes, 60 events: never more than 3 at
// once. Then a worker holding all 3 slots is killed: its slots come back
// when their leases run out and the rest is delivered.
func TestConcurrencyCapAcrossWorkerProcesses(t *testing.T) {
	t.Parallel()
	c := newCluster(t, nil)
	c.start(bootstrap.RoleScheduler)
	rcv := newScripted(t)
	probe := &concurrencyProbe{hold: 300 * time.Millisecond}
	ep, url := rcv.add("/capped", probe.script)
	c.subscribe(url, "capped.event", client.SubscriptionInput{MaxInFlight: new(int64(3)), Timeout: new("1s")})

	victim := c.startProcess(bootstrap.RoleWorker)
	var ids []string
	for i := range 60 {
		ids = append(ids, c.publish("capped.event", fmt.Sprintf(`{"i":%d}`, i)))
	}
	waitFor(t, 20*time.Second, "the first worker to fill all 3 slots", func() bool {
		return probe.inFlight.Load() == 3 && len(ep.got()) >= 6
	})
	if err := victim.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = victim.Wait()
	killed := time.Now()
	c.startProcess(bootstrap.RoleWorker)
	c.startProcess(bootstrap.RoleWorker)

	waitAllArrived(t, ep, ids, 90*time.Second)
	if peak := probe.peak.Load(); peak > 3 {
		t.Errorf("the endpoint had %d requests in flight at once, want at most 3", peak)
	}
	t.Logf("peak in flight %d; delivered everything %s after the kill", probe.peak.Load(), time.Since(killed))
}

// failing counts a Protection's failed Admits.
type failing struct {
	ports.Protection
	failed atomic.Int32
}

func (f *failing) Admit(ctx context.Context, req ports.Admission) (ports.Admitted, error) {
	res, err := f.Protection.Admit(ctx, req)
	if err != nil {
		f.failed.Add(1)
	}
	return res, err
}

// TestProtectionFallsBackWhenRedisIsUnreachable: the protection's Redis
// is down (the rest of Redis is fine); deliveries go on, capped by the
// worker's local protection at max_in_flight.
func TestProtectionFallsBackWhenRedisIsUnreachable(t *testing.T) {
	t.Parallel()
	c := newCluster(t, nil)
	dead := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { _ = dead.Close() })
	shared := &failing{Protection: redis.NewProtection(dead, "x:", redis.ProtectionOptions{})}
	c.start(bootstrap.RoleWorker, fx.Decorate(func(ports.Protection) ports.Protection { return shared }))
	c.start(bootstrap.RoleScheduler)
	rcv := newScripted(t)
	probe := &concurrencyProbe{hold: 50 * time.Millisecond}
	ep, url := rcv.add("/local", probe.script)
	c.subscribe(url, "local.event", client.SubscriptionInput{MaxInFlight: new(int64(2))})
	var ids []string
	for i := range 30 {
		ids = append(ids, c.publish("local.event", fmt.Sprintf(`{"i":%d}`, i)))
	}
	waitAllArrived(t, ep, ids, 30*time.Second)
	if shared.failed.Load() == 0 {
		t.Error("the shared protection never failed, yet its Redis is unreachable")
	}
	if peak := probe.peak.Load(); peak > 2 {
		t.Errorf("%d requests in flight at once under the local protection, want at most 2", peak)
	}
}
