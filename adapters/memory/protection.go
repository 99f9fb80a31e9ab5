package memory

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// protectionMinSweep is the least number of entries the rate limiter
// keeps before it sweeps the ones that no longer matter.
const protectionMinSweep = 1024

// breakers keeps each subscription's domain.Breaker. A closed breaker with
// no failures is not stored, like in Redis. Protection's mutex guards it.
type breakers struct {
	state map[string]domain.Breaker
}

// allow applies domain.Breaker.Allow.
func (b *breakers) allow(subscriptionID string, cfg domain.BreakerConfig, now time.Time) (bool, time.Time) {
	next, allowed, retryAt := b.state[subscriptionID].Allow(cfg, now)
	b.store(subscriptionID, next)
	return allowed, retryAt
}

// record applies domain.Breaker.Record.
func (b *breakers) record(subscriptionID string, cfg domain.BreakerConfig, success bool, now time.Time) domain.Breaker {
	return b.store(subscriptionID, b.state[subscriptionID].Record(cfg, success, now))
}

// store keeps s the way the Redis adapter round-trips it, OpenUntil in UTC
// without a monotonic reading, and returns what it kept. A closed breaker
// with no failures is not kept at all.
func (b *breakers) store(subscriptionID string, s domain.Breaker) domain.Breaker {
	if !s.OpenUntil.IsZero() {
		s.OpenUntil = s.OpenUntil.Round(0).UTC()
	}
	if s.Phase != domain.BreakerOpen && s.Phase != domain.BreakerHalfOpen && s.Failures == 0 && s.OpenUntil.IsZero() && s.ProbesStarted == 0 {
		delete(b.state, subscriptionID)
		return s
	}
	b.state[subscriptionID] = s
	return s
}

// RateBurst is the burst Protection's rate limit allows at perSecond requests a second:
// a tenth of a second's worth, at least 1, the same as the Redis adapter's
// (see its RateBurst): any 1-second window sees at most perSecond +
// RateBurst(perSecond) requests.
func RateBurst(perSecond int) int {
	return max(1, perSecond/10)
}

// rateLimiter is GCRA (the generic cell rate algorithm) per subscription,
// the algorithm the Redis adapter runs, with the same burst,
// RateBurst(perSecond). Each subscription keeps only its theoretical
// arrival time: the instant its budget would be full again. Protection's
// mutex guards it.
type rateLimiter struct {
	tat     map[string]time.Time
	sweepAt int
}

// take takes one request from subscriptionID's budget at now, or says how
// long until one is left.
func (r *rateLimiter) take(subscriptionID string, perSecond int, now time.Time) (bool, time.Duration) {
	interval := time.Second / time.Duration(perSecond)
	burstOffset := interval * time.Duration(RateBurst(perSecond))
	tat := r.tat[subscriptionID]
	if tat.Before(now) {
		tat = now
	}
	next := tat.Add(interval)
	// The request may go when the budget, after it, is no more than the
	// burst ahead of now.
	if wait := next.Add(-burstOffset).Sub(now); wait > 0 {
		return false, wait
	}
	r.tat[subscriptionID] = next
	r.sweep(now)
	return true, 0
}

// sweep forgets, now and then, subscriptions whose budget is full again:
// they are the same as subscriptions never seen.
func (r *rateLimiter) sweep(now time.Time) {
	if len(r.tat) < r.sweepAt {
		return
	}
	for id, tat := range r.tat {
		if !tat.After(now) {
			delete(r.tat, id)
		}
	}
	r.sweepAt = max(2*len(r.tat), protectionMinSweep)
}

// semaphore keeps each subscription's slots by holder with their lease's
// end; a slot whose lease ended does not count, and taking a slot for a
// holder that has one renews its lease, even when every slot is taken.
// Protection's mutex guards it.
type semaphore struct {
	leases map[string]map[string]time.Time // subscription → holder → lease end
}

// tryAcquire takes one of subscriptionID's limit slots for holder until
// now+ttl, or returns false when all are taken.
func (s *semaphore) tryAcquire(subscriptionID, holder string, limit int, ttl time.Duration, now time.Time) bool {
	held := s.leases[subscriptionID]
	for h, end := range held {
		if !end.After(now) {
			delete(held, h)
		}
	}
	if _, renew := held[holder]; !renew && len(held) >= limit {
		return false
	}
	if held == nil {
		held = make(map[string]time.Time)
		s.leases[subscriptionID] = held
	}
	held[holder] = now.Add(ttl)
	return true
}

// release gives holder's slot back; a holder without one is left alone.
func (s *semaphore) release(subscriptionID, holder string) {
	held := s.leases[subscriptionID]
	delete(held, holder)
	if len(held) == 0 {
		delete(s.leases, subscriptionID)
	}
}

// ProtectionOptions configures a Protection. The zero value is valid.
type ProtectionOptions struct {
	// Now is the clock the rate limit refills and slots' leases end by;
	// nil means time.Now. The breaker decides at the time it is given.
	Now func() time.Time
}

// Protection is ports.Protection in process, with the Redis adapter's
// semantics: a breaker, a GCRA rate limit and leased slots per
// subscription, under one mutex, so each Admit and each Finish is atomic
// and the bounds are exact. It serves the worker as its local protection
// when Redis fails, and tests. Safe for concurrent use.
type Protection struct {
	now func() time.Time

	mu       sync.Mutex
	breakers breakers
	limiter  rateLimiter
	slots    semaphore
}

var _ ports.Protection = (*Protection)(nil)

// NewProtection returns a Protection where every subscription's breaker
// is closed, its budget full and its slots free.
func NewProtection(opts ProtectionOptions) *Protection {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Protection{
		now:      opts.Now,
		breakers: breakers{state: make(map[string]domain.Breaker)},
		limiter:  rateLimiter{tat: make(map[string]time.Time), sweepAt: protectionMinSweep},
		slots:    semaphore{leases: make(map[string]map[string]time.Time)},
	}
}

// Admit asks the breaker, the rate limit and the slots in that order; see
// ports.Protection.
func (p *Protection) Admit(_ context.Context, req ports.Admission) (ports.Admitted, error) {
	switch {
	case req.PerSecond < 1:
		return ports.Admitted{}, fmt.Errorf("memory protection: %s: rate must be at least 1 request per second, got %d", req.SubscriptionID, req.PerSecond)
	case req.Holder == "":
		return ports.Admitted{}, fmt.Errorf("memory protection: %s: holder is empty", req.SubscriptionID)
	case req.MaxInFlight < 1:
		return ports.Admitted{}, fmt.Errorf("memory protection: %s: max in flight must be at least 1, got %d", req.SubscriptionID, req.MaxInFlight)
	case req.Lease <= 0:
		return ports.Admitted{}, fmt.Errorf("memory protection: %s: lease must be positive, got %s", req.SubscriptionID, req.Lease)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if allowed, retryAt := p.breakers.allow(req.SubscriptionID, req.Breaker, req.Now); !allowed {
		return ports.Admitted{Refused: ports.RefusedByBreaker, RetryAt: retryAt}, nil
	}
	now := p.now()
	if allowed, retryAfter := p.limiter.take(req.SubscriptionID, req.PerSecond, now); !allowed {
		return ports.Admitted{Refused: ports.RefusedByRateLimit, RetryAfter: retryAfter}, nil
	}
	if !p.slots.tryAcquire(req.SubscriptionID, req.Holder, req.MaxInFlight, req.Lease, now) {
		return ports.Admitted{Refused: ports.RefusedBySemaphore}, nil
	}
	return ports.Admitted{}, nil
}

// Finish gives holder's slot back and records the result on the breaker;
// see ports.Protection.
func (p *Protection) Finish(_ context.Context, subscriptionID, holder string, cfg domain.BreakerConfig, success bool, now time.Time) (domain.Breaker, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.slots.release(subscriptionID, holder)
	return p.breakers.record(subscriptionID, cfg, success, now), nil
}
