package memory

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// protectionMinSweep is the least number of entries a RateLimiter or
// Semaphore keeps before it sweeps the ones that no longer matter.
const protectionMinSweep = 1024

// Breakers is ports.Breakers in process: each subscription's
// domain.Breaker in a map under one mutex, which makes every transition
// atomic. A closed breaker with no failures is not stored, like in Redis.
// Safe for concurrent use.
type Breakers struct {
	mu    sync.Mutex
	state map[string]domain.Breaker
}

var _ ports.Breakers = (*Breakers)(nil)

// NewBreakers returns Breakers where every subscription's breaker is
// closed.
func NewBreakers() *Breakers {
	return &Breakers{state: make(map[string]domain.Breaker)}
}

// Allow applies domain.Breaker.Allow atomically; see ports.Breakers.
func (b *Breakers) Allow(_ context.Context, subscriptionID string, cfg domain.BreakerConfig, now time.Time) (bool, time.Time, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	next, allowed, retryAt := b.state[subscriptionID].Allow(cfg, now)
	b.store(subscriptionID, next)
	return allowed, retryAt, nil
}

// Record applies domain.Breaker.Record atomically; see ports.Breakers.
func (b *Breakers) Record(_ context.Context, subscriptionID string, cfg domain.BreakerConfig, success bool, now time.Time) (domain.Breaker, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.store(subscriptionID, b.state[subscriptionID].Record(cfg, success, now)), nil
}

// store keeps s the way the Redis adapter round-trips it, OpenUntil in UTC
// without a monotonic reading, and returns what it kept. A closed breaker
// with no failures is not kept at all.
func (b *Breakers) store(subscriptionID string, s domain.Breaker) domain.Breaker {
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

// RateBurst is the burst RateLimiter allows at perSecond requests a second:
// a tenth of a second's worth, at least 1, the same as the Redis adapter's
// (see its RateBurst): any 1-second window sees at most perSecond +
// RateBurst(perSecond) requests.
func RateBurst(perSecond int) int {
	return max(1, perSecond/10)
}

// RateLimiterOptions configures a memory RateLimiter. The zero value is
// valid.
type RateLimiterOptions struct {
	// Now is the clock the budget refills by; nil means time.Now. Tests pass
	// a fake clock to refill without waiting.
	Now func() time.Time
}

// RateLimiter is ports.RateLimiter in process: GCRA (the generic cell rate
// algorithm) per subscription, the algorithm the Redis adapter runs, with
// the same burst, RateBurst(perSecond). Each subscription keeps only its
// theoretical arrival time: the instant its budget would be full again.
// Safe for concurrent use.
type RateLimiter struct {
	now func() time.Time

	mu      sync.Mutex
	tat     map[string]time.Time
	sweepAt int
}

var _ ports.RateLimiter = (*RateLimiter)(nil)

// NewRateLimiter returns a RateLimiter where every subscription has its
// full budget.
func NewRateLimiter(opts RateLimiterOptions) *RateLimiter {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &RateLimiter{now: opts.Now, tat: make(map[string]time.Time), sweepAt: protectionMinSweep}
}

// Take takes one request from subscriptionID's budget; see
// ports.RateLimiter. perSecond below 1 is an error.
func (r *RateLimiter) Take(_ context.Context, subscriptionID string, perSecond int) (bool, time.Duration, error) {
	if perSecond < 1 {
		return false, 0, fmt.Errorf("memory rate limiter: %s: rate must be at least 1 request per second, got %d", subscriptionID, perSecond)
	}
	interval := time.Second / time.Duration(perSecond)
	burstOffset := interval * time.Duration(RateBurst(perSecond))

	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	tat := r.tat[subscriptionID]
	if tat.Before(now) {
		tat = now
	}
	next := tat.Add(interval)
	// The request may go when the budget, after it, is no more than the
	// burst ahead of now.
	if wait := next.Add(-burstOffset).Sub(now); wait > 0 {
		return false, wait, nil
	}
	r.tat[subscriptionID] = next
	r.sweep(now)
	return true, 0, nil
}

// sweep forgets, now and then, subscriptions whose budget is full again:
// they are the same as subscriptions never seen.
func (r *RateLimiter) sweep(now time.Time) {
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

// SemaphoreOptions configures a memory Semaphore. The zero value is valid.
type SemaphoreOptions struct {
	// Now is the clock leases run out by; nil means time.Now. Tests pass a
	// fake clock to expire leases without waiting.
	Now func() time.Time
}

// Semaphore is ports.Semaphore in process, with the Redis adapter's
// semantics: each subscription's leases by holder with their expiry; a
// lease that ran out does not count; TryAcquire for a holder that already
// has a slot renews its lease and succeeds even when every slot is taken.
// It is also the per-process fallback when Redis is unreachable (see the
// Redis adapter's FallbackSemaphore). Safe for concurrent use.
type Semaphore struct {
	now func() time.Time

	mu     sync.Mutex
	leases map[string]map[string]time.Time // subscription → holder → expiry
}

var _ ports.Semaphore = (*Semaphore)(nil)

// NewSemaphore returns a Semaphore with every slot free.
func NewSemaphore(opts SemaphoreOptions) *Semaphore {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Semaphore{now: opts.Now, leases: make(map[string]map[string]time.Time)}
}

// TryAcquire takes a slot for holder; see ports.Semaphore. An empty holder,
// a limit below 1 or a ttl of 0 or less is an error.
func (s *Semaphore) TryAcquire(_ context.Context, subscriptionID, holder string, limit int, ttl time.Duration) (bool, error) {
	switch {
	case holder == "":
		return false, fmt.Errorf("memory semaphore: %s: holder is empty", subscriptionID)
	case limit < 1:
		return false, fmt.Errorf("memory semaphore: %s: limit must be at least 1, got %d", subscriptionID, limit)
	case ttl <= 0:
		return false, fmt.Errorf("memory semaphore: %s: lease ttl must be positive, got %s", subscriptionID, ttl)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	held := s.leases[subscriptionID]
	for h, expiry := range held {
		if !expiry.After(now) {
			delete(held, h)
		}
	}
	if _, renew := held[holder]; !renew && len(held) >= limit {
		return false, nil
	}
	if held == nil {
		held = make(map[string]time.Time)
		s.leases[subscriptionID] = held
	}
	held[holder] = now.Add(ttl)
	return true, nil
}

// Release gives holder's slot back; a holder without one is not an error.
func (s *Semaphore) Release(_ context.Context, subscriptionID, holder string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	held := s.leases[subscriptionID]
	delete(held, holder)
	if len(held) == 0 {
		delete(s.leases, subscriptionID)
	}
	return nil
}

// Protection is ports.Protection in process: the given Breakers,
// RateLimiter and Semaphore asked one after the other, so it shares their
// state exactly. Each step is atomic on its own, which is all the port
// promises. Safe for concurrent use.
type Protection struct {
	breakers  *Breakers
	limiter   *RateLimiter
	semaphore *Semaphore
}

var _ ports.Protection = (*Protection)(nil)

// NewProtection returns a Protection over b, l and s. Nil ones are a
// programming error and panic.
func NewProtection(b *Breakers, l *RateLimiter, s *Semaphore) *Protection {
	if b == nil || l == nil || s == nil {
		panic("memory protection: breakers, rate limiter and semaphore are required")
	}
	return &Protection{breakers: b, limiter: l, semaphore: s}
}

// Admit asks the breaker, the rate limiter and the semaphore in that
// order; see ports.Protection.
func (p *Protection) Admit(ctx context.Context, req ports.Admission) (ports.Admitted, error) {
	if req.PerSecond < 1 {
		return ports.Admitted{}, fmt.Errorf("memory protection: %s: rate must be at least 1 request per second, got %d", req.SubscriptionID, req.PerSecond)
	}
	allowed, retryAt, err := p.breakers.Allow(ctx, req.SubscriptionID, req.Breaker, req.Now)
	if err != nil {
		return ports.Admitted{}, err
	}
	if !allowed {
		return ports.Admitted{Refused: ports.RefusedByBreaker, RetryAt: retryAt}, nil
	}
	allowed, retryAfter, err := p.limiter.Take(ctx, req.SubscriptionID, req.PerSecond)
	if err != nil {
		return ports.Admitted{}, err
	}
	if !allowed {
		return ports.Admitted{Refused: ports.RefusedByRateLimit, RetryAfter: retryAfter}, nil
	}
	ok, err := p.semaphore.TryAcquire(ctx, req.SubscriptionID, req.Holder, req.MaxInFlight, req.Lease)
	if err != nil {
		return ports.Admitted{}, err
	}
	if !ok {
		return ports.Admitted{Refused: ports.RefusedBySemaphore}, nil
	}
	return ports.Admitted{}, nil
}

// Finish releases holder's slot and records the result on the breaker;
// see ports.Protection.
func (p *Protection) Finish(ctx context.Context, subscriptionID, holder string, cfg domain.BreakerConfig, success bool, now time.Time) (domain.Breaker, error) {
	if err := p.semaphore.Release(ctx, subscriptionID, holder); err != nil {
		return domain.Breaker{}, err
	}
	return p.breakers.Record(ctx, subscriptionID, cfg, success, now)
}
