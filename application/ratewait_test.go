package application_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/dispatch-webhooks/dispatch/application"
	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// TestAThrottledDeliveryWaitsForTheRateLimitsNextRequest: a delivery the
// rate limit refuses for a few milliseconds waits for them in its worker
// and is attempted, instead of being postponed until the scheduler's next
// scan; whether the protections are asked one by one or together.
func TestAThrottledDeliveryWaitsForTheRateLimitsNextRequest(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		protect func(*pipeline) (asked func() int)
	}{
		{"separate ports", func(p *pipeline) func() int {
			g := &gate{throttle: 5 * time.Millisecond, throttleFirst: 1}
			protected(p, g)
			return func() int { g.mu.Lock(); defer g.mu.Unlock(); return g.takes }
		}},
		{"combined protection", func(p *pipeline) func() int {
			both := &together{admits: []ports.Admitted{{Refused: ports.RefusedByRateLimit, RetryAfter: 5 * time.Millisecond}}}
			protected(p, &gate{})
			p.deliver.Protection = both
			return func() int { both.mu.Lock(); defer both.mu.Unlock(); return len(both.admitted) }
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := newPipeline()
			asked := tt.protect(p)
			p.sender.script = []sendResult{answer(200)}
			sub := p.subscribe(t, "a")
			_, id := p.fannedOut(t, sub)
			start := time.Now()
			res, err := p.handle(context.Background(), id)
			if err != nil || res.Skipped || res.Delivery.Status != domain.DeliveryDelivered {
				t.Fatalf("result = %+v, %v; want an attempt that succeeded", res, err)
			}
			if waited := time.Since(start); waited < 5*time.Millisecond {
				t.Errorf("attempted after %s, want after the rate limit's 5 ms", waited)
			}
			if n := asked(); n != 2 {
				t.Errorf("the rate limit was asked %d times, want twice", n)
			}
			if n := application.RateWaiting(p.deliver, sub.ID); n != 0 {
				t.Errorf("%d still waiting, want none", n)
			}
		})
	}
}

// TestAThrottledDeliveryIsPostponedWhenWaitingWouldNotDo: the delivery is
// postponed at once (the rate limit asked only once), when the limit's
// next request is further off than a delivery waits, and when as many
// wait as the limit lets through in that time or as the subscription may
// have in flight.
func TestAThrottledDeliveryIsPostponedWhenWaitingWouldNotDo(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		throttle    time.Duration
		rateLimit   int
		maxInFlight int
		// waiting is how many deliveries already wait.
		waiting int
	}{
		{"the next request is two seconds off", 2 * time.Second, 100, 100, 0},
		{"two requests a second and two waiting", 400 * time.Millisecond, 2, 100, 2},
		{"one in flight at most and one waiting", 400 * time.Millisecond, 100, 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := newPipeline()
			g := &gate{throttle: tt.throttle}
			protected(p, g)
			sub, err := p.subs.Create(context.Background(), domain.NewSubscriptionInput{
				URL: "https://example.com/hook", EventTypes: []string{"a"}, RateLimit: tt.rateLimit, MaxInFlight: tt.maxInFlight,
			})
			if err != nil {
				t.Fatal(err)
			}
			var waiters sync.WaitGroup
			for range tt.waiting {
				_, waiting := p.fannedOut(t, sub)
				waiters.Go(func() { _, _ = p.handle(context.Background(), waiting) })
			}
			waitUntil(t, func() bool { return application.RateWaiting(p.deliver, sub.ID) == tt.waiting })
			takes := func() int { g.mu.Lock(); defer g.mu.Unlock(); return g.takes }
			before := takes()

			_, id := p.fannedOut(t, sub)
			start := time.Now()
			res, err := p.handle(context.Background(), id)
			if err != nil || res.Postponed != domain.ReasonThrottled {
				t.Fatalf("result = %+v, %v; want postponed (throttled)", res, err)
			}
			if waited := time.Since(start); waited >= 50*time.Millisecond {
				t.Errorf("postponed after %s, want at once", waited)
			}
			// Those waiting ask too: the count is the new delivery's alone
			// when none wait.
			if n := takes() - before; tt.waiting == 0 && n != 1 {
				t.Errorf("the rate limit was asked %d times, want once", n)
			}
			waiters.Wait()
		})
	}
}

// TestAPostponedThrottledDeliveryIsAppendedAgainWhenDue: a delivery
// postponed because every slot was taken comes back to the stream by
// itself when it is due, without waiting for the scheduler's scan, and
// not before.
func TestAPostponedThrottledDeliveryIsAppendedAgainWhenDue(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		gate   *gate
		append bool
	}{
		{"every slot taken", &gate{full: true}, true},
		{"not before it is due", &gate{throttle: 2 * time.Second}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := newPipeline()
			protected(p, tt.gate)
			p.deliver.Queue = p.queue
			sub := p.subscribe(t, "a")
			_, id := p.fannedOut(t, sub)
			before := len(p.queue.bodies(ports.DeliveryStream))
			res, err := p.handle(context.Background(), id)
			if err != nil || res.Postponed != domain.ReasonThrottled {
				t.Fatalf("result = %+v, %v; want postponed (throttled)", res, err)
			}
			appended := func() bool {
				for _, body := range p.queue.bodies(ports.DeliveryStream)[before:] {
					if body == id {
						return true
					}
				}
				return false
			}
			if tt.append {
				waitUntil(t, appended)
				return
			}
			time.Sleep(300 * time.Millisecond)
			if appended() {
				t.Error("appended again before it was due")
			}
		})
	}
}
