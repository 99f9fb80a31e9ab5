package application_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// gate is a ports.Protection whose breaker, rate limit and slots each
// answer as scripted.
type gate struct {
	mu          sync.Mutex
	breakerOpen bool
	// err fails every Admit and Finish, as an unreachable store would.
	err      error
	recorded []bool
	throttle time.Duration
	// throttleFirst, when above 0, is how many Admits past the breaker
	// throttle before the rest pass; takes counts them.
	throttleFirst, takes int
	full                 bool
	// limit, when above 0, is how many slots there are.
	limit    int
	refused  int
	held     map[string]bool
	released []string
}

func (g *gate) Admit(_ context.Context, req ports.Admission) (ports.Admitted, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err != nil {
		return ports.Admitted{}, g.err
	}
	if g.breakerOpen {
		return ports.Admitted{Refused: ports.RefusedByBreaker, RetryAt: req.Now.Add(30 * time.Second)}, nil
	}
	g.takes++
	if g.throttle != 0 && (g.throttleFirst == 0 || g.takes <= g.throttleFirst) {
		return ports.Admitted{Refused: ports.RefusedByRateLimit, RetryAfter: g.throttle}, nil
	}
	if g.full || g.limit > 0 && len(g.held) >= g.limit {
		g.refused++
		return ports.Admitted{Refused: ports.RefusedBySemaphore}, nil
	}
	if g.held == nil {
		g.held = map[string]bool{}
	}
	g.held[req.Holder] = true
	return ports.Admitted{}, nil
}

func (g *gate) Finish(_ context.Context, _, holder string, _ domain.BreakerConfig, success bool, _ time.Time) (domain.Breaker, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err != nil {
		return domain.Breaker{}, g.err
	}
	delete(g.held, holder)
	g.released = append(g.released, holder)
	g.recorded = append(g.recorded, success)
	return domain.Breaker{Phase: domain.BreakerClosed}, nil
}

func protected(p *pipeline, g *gate) {
	p.deliver.Protection = g
	p.deliver.Breaker = domain.DefaultBreakerConfig()
}

func TestProtectionsPostponeWithoutAnAttempt(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		gate   func() *gate
		reason string
		after  time.Duration
	}{
		{"open circuit", func() *gate { return &gate{breakerOpen: true} }, domain.ReasonCircuitOpen, 30 * time.Second},
		{"rate limited", func() *gate { return &gate{throttle: 2 * time.Second} }, domain.ReasonThrottled, 2 * time.Second},
		{"every slot taken", func() *gate { return &gate{full: true} }, domain.ReasonThrottled, 150 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := newPipeline()
			protected(p, tt.gate())
			p.deliver.Requests = make(chan struct{}, 1)
			sub := p.subscribe(t, "a")
			ev, id := p.fannedOut(t, sub)
			now := p.clock.Now()
			res, err := p.handle(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			if len(p.deliver.Requests) != 0 {
				t.Error("the request slot is still taken")
			}
			if !res.Skipped || res.Postponed != tt.reason {
				t.Fatalf("result = %+v, want postponed (%s)", res, tt.reason)
			}
			if len(p.sender.requests) != 0 {
				t.Error("a request was sent")
			}
			d, _ := p.store.GetDelivery(context.Background(), id)
			if d.Status != domain.DeliveryPending || d.Attempts != 0 || d.Reason != tt.reason {
				t.Errorf("delivery = %s, %d attempts, reason %q; want pending, 0, %s", d.Status, d.Attempts, d.Reason, tt.reason)
			}
			if !d.NextAttemptAt.Equal(now.Add(tt.after)) {
				t.Errorf("due again at +%s, want +%s", d.NextAttemptAt.Sub(now), tt.after)
			}
			if attempts, _ := p.events.Attempts(context.Background(), ev.ID, ports.AttemptPage{Limit: 100}); len(attempts) != 0 {
				t.Errorf("%d attempts recorded, want none", len(attempts))
			}
		})
	}
}

func TestProtectionsLetAHealthyRequestThroughAndFreeTheSlot(t *testing.T) {
	t.Parallel()
	p := newPipeline()
	g := &gate{}
	protected(p, g)
	sub := p.subscribe(t, "a")
	_, id := p.fannedOut(t, sub)
	p.sender.script = []sendResult{answer(503)}
	res, err := p.handle(context.Background(), id)
	if err != nil || res.Skipped || res.Delivery.Status != domain.DeliveryRetrying {
		t.Fatalf("result = %+v, %v; want one retryable attempt", res, err)
	}
	if len(g.held) != 0 || len(g.released) != 1 || g.released[0] != id {
		t.Errorf("slots held %v, released %v; want the delivery's slot released", g.held, g.released)
	}
	if len(g.recorded) != 1 || g.recorded[0] {
		t.Errorf("breaker recorded %v, want one failure", g.recorded)
	}

	// A 4xx is an answer from a healthy endpoint: it counts as a success
	// for the breaker.
	p.clock.Advance(time.Hour)
	p.sender.script = []sendResult{answer(400)}
	if _, err := p.handle(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	if len(g.recorded) != 2 || !g.recorded[1] {
		t.Errorf("breaker recorded %v after a 400, want a success", g.recorded)
	}
}

// TestAFailingProtectionWithoutLocalFailsOpen: with no local protection,
// a delivery whose Protection fails goes ahead, reported as degraded.
func TestAFailingProtectionWithoutLocalFailsOpen(t *testing.T) {
	t.Parallel()
	p := newPipeline()
	g := &gate{err: errors.New("redis: connection refused")}
	protected(p, g)
	sub := p.subscribe(t, "a")
	_, id := p.fannedOut(t, sub)
	p.sender.script = []sendResult{answer(200)}
	res, err := p.handle(context.Background(), id)
	if err != nil || res.Delivery.Status != domain.DeliveryDelivered {
		t.Fatalf("result = %+v, %v; want delivered despite the breaker store", res, err)
	}
	if res.Degraded == nil {
		t.Error("Degraded not reported")
	}
}

func TestARetriedDeliveryIsPostponedAsRetrying(t *testing.T) {
	t.Parallel()
	p := newPipeline()
	g := &gate{}
	protected(p, g)
	sub := p.subscribe(t, "a")
	_, id := p.fannedOut(t, sub)
	p.sender.script = []sendResult{answer(500)}
	first, _ := p.handle(context.Background(), id)
	p.clock.Advance(first.Delivery.NextAttemptAt.Sub(p.clock.Now()))
	g.breakerOpen = true
	res, err := p.handle(context.Background(), id)
	if err != nil || res.Postponed != domain.ReasonCircuitOpen {
		t.Fatalf("result = %+v, %v", res, err)
	}
	d, _ := p.store.GetDelivery(context.Background(), id)
	if d.Status != domain.DeliveryRetrying || d.Attempts != 1 {
		t.Errorf("delivery = %s with %d attempts, want retrying with 1", d.Status, d.Attempts)
	}
}

// together is a scripted ports.Protection, told apart from gate (the
// local protection in these tests) to tell which one a delivery used.
type together struct {
	mu sync.Mutex
	// admits are the first answers of Admit, in order; admit the rest.
	admits    []ports.Admitted
	admit     ports.Admitted
	admitErr  error
	finishErr error
	admitted  []ports.Admission
	finished  []bool
	holders   []string
	// limit, when above 0, is how many slots there are; inFlight are
	// taken.
	limit, inFlight int
}

func (p *together) Admit(_ context.Context, req ports.Admission) (ports.Admitted, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.admitted = append(p.admitted, req)
	if len(p.admits) > 0 {
		next := p.admits[0]
		p.admits = p.admits[1:]
		return next, nil
	}
	if p.limit > 0 && p.admitErr == nil {
		if p.inFlight >= p.limit {
			return ports.Admitted{Refused: ports.RefusedBySemaphore}, nil
		}
		p.inFlight++
	}
	return p.admit, p.admitErr
}

func (p *together) Finish(_ context.Context, _, holder string, _ domain.BreakerConfig, success bool, _ time.Time) (domain.Breaker, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.finished = append(p.finished, success)
	p.holders = append(p.holders, holder)
	p.inFlight = max(p.inFlight-1, 0)
	return domain.Breaker{Phase: domain.BreakerClosed}, p.finishErr
}

func TestCombinedProtectionPostpones(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		admit  ports.Admitted
		reason string
		after  time.Duration
	}{
		{"open circuit", ports.Admitted{Refused: ports.RefusedByBreaker, RetryAt: newClock().Now().Add(30 * time.Second)}, domain.ReasonCircuitOpen, 30 * time.Second},
		{"rate limited", ports.Admitted{Refused: ports.RefusedByRateLimit, RetryAfter: 2 * time.Second}, domain.ReasonThrottled, 2 * time.Second},
		{"every slot taken", ports.Admitted{Refused: ports.RefusedBySemaphore}, domain.ReasonThrottled, 150 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := newPipeline()
			g, both := &gate{}, &together{admit: tt.admit}
			protected(p, g)
			p.deliver.Protection, p.deliver.Local = both, g
			sub := p.subscribe(t, "a")
			_, id := p.fannedOut(t, sub)
			now := p.clock.Now()
			res, err := p.handle(context.Background(), id)
			if err != nil || !res.Skipped || res.Postponed != tt.reason {
				t.Fatalf("result = %+v, %v; want postponed (%s)", res, err, tt.reason)
			}
			d, _ := p.store.GetDelivery(context.Background(), id)
			if !d.NextAttemptAt.Equal(now.Add(tt.after)) || d.Attempts != 0 {
				t.Errorf("due again at +%s after %d attempts, want +%s after none", d.NextAttemptAt.Sub(now), d.Attempts, tt.after)
			}
			if len(both.finished) != 0 || len(g.held) != 0 || len(g.released) != 0 {
				t.Errorf("finished %v, local slots %v released %v; want nothing to finish", both.finished, g.held, g.released)
			}
		})
	}
}

func TestCombinedProtectionAdmitsAndFinishes(t *testing.T) {
	t.Parallel()
	p := newPipeline()
	g, both := &gate{}, &together{}
	protected(p, g)
	p.deliver.Protection, p.deliver.Local = both, g
	sub := p.subscribe(t, "a")
	_, id := p.fannedOut(t, sub)
	p.sender.script = []sendResult{answer(503)}
	res, err := p.handle(context.Background(), id)
	if err != nil || res.Skipped || res.Delivery.Status != domain.DeliveryRetrying || res.Degraded != nil {
		t.Fatalf("result = %+v, %v; want one retryable attempt, not degraded", res, err)
	}
	if len(both.admitted) != 1 {
		t.Fatalf("admitted %d times, want once", len(both.admitted))
	}
	want := ports.Admission{
		SubscriptionID: sub.ID, Holder: id, Breaker: domain.DefaultBreakerConfig(), Now: both.admitted[0].Now,
		PerSecond: sub.RateLimit, MaxInFlight: sub.MaxInFlight, Lease: sub.Timeout + 5*time.Second,
	}
	if both.admitted[0] != want {
		t.Errorf("admission = %+v, want %+v", both.admitted[0], want)
	}
	if len(both.finished) != 1 || both.finished[0] || both.holders[0] != id {
		t.Errorf("finished %v for %v, want one failure for %s", both.finished, both.holders, id)
	}
	if res.Breaker == nil {
		t.Error("the breaker's state after Finish is not reported")
	}
	if len(g.recorded) != 0 || len(g.held) != 0 || len(g.released) != 0 {
		t.Errorf("the local protection was used: recorded %v, held %v, released %v", g.recorded, g.held, g.released)
	}
}

// TestAFailingProtectionFallsBackToLocal: a delivery whose Protection
// fails is protected by Local, begun and ended there, and reported as
// degraded.
func TestAFailingProtectionFallsBackToLocal(t *testing.T) {
	t.Parallel()
	p := newPipeline()
	g, both := &gate{}, &together{admitErr: errors.New("redis: connection refused")}
	protected(p, g)
	p.deliver.Protection, p.deliver.Local = both, g
	sub := p.subscribe(t, "a")
	_, id := p.fannedOut(t, sub)
	p.sender.script = []sendResult{answer(200)}
	res, err := p.handle(context.Background(), id)
	if err != nil || res.Delivery.Status != domain.DeliveryDelivered {
		t.Fatalf("result = %+v, %v; want delivered", res, err)
	}
	if res.Degraded == nil {
		t.Error("Degraded not reported")
	}
	if len(both.finished) != 0 {
		t.Errorf("Finish called %v after Admit failed", both.finished)
	}
	if len(g.held) != 0 || len(g.released) != 1 || g.released[0] != id || len(g.recorded) != 1 || !g.recorded[0] {
		t.Errorf("local: held %v, released %v, recorded %v; want the slot released and one success recorded", g.held, g.released, g.recorded)
	}
}

// TestLocalProtectionRefuses: Local's refusal postpones the delivery as
// the shared one's would.
func TestLocalProtectionRefuses(t *testing.T) {
	t.Parallel()
	p := newPipeline()
	g, both := &gate{full: true}, &together{admitErr: errors.New("redis: connection refused")}
	protected(p, g)
	p.deliver.Protection, p.deliver.Local = both, g
	sub := p.subscribe(t, "a")
	_, id := p.fannedOut(t, sub)
	res, err := p.handle(context.Background(), id)
	if err != nil || !res.Skipped || res.Postponed != domain.ReasonThrottled || res.Degraded == nil {
		t.Fatalf("result = %+v, %v; want postponed as throttled, degraded", res, err)
	}
	if len(p.sender.requests) != 0 {
		t.Error("a request was sent")
	}
}

func TestCombinedProtectionFinishFailureIsDegraded(t *testing.T) {
	t.Parallel()
	p := newPipeline()
	g, both := &gate{}, &together{finishErr: errors.New("redis: connection reset")}
	protected(p, g)
	p.deliver.Protection, p.deliver.Local = both, g
	sub := p.subscribe(t, "a")
	_, id := p.fannedOut(t, sub)
	p.sender.script = []sendResult{answer(200)}
	res, err := p.handle(context.Background(), id)
	if err != nil || res.Delivery.Status != domain.DeliveryDelivered {
		t.Fatalf("result = %+v, %v; want delivered", res, err)
	}
	if res.Degraded == nil || res.Breaker != nil {
		t.Errorf("degraded %v, breaker %v; want the lost record reported and no state", res.Degraded, res.Breaker)
	}
}
