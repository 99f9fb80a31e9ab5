package redis

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/dispatch-webhooks/dispatch/ports"
)

// FallbackSemaphore defaults.
const (
	// DefaultFallbackRetryInterval is how long a FallbackSemaphore stays on
	// its local semaphore before trying the primary again.
	DefaultFallbackRetryInterval = 5 * time.Second
	// DefaultFallbackPrimaryTimeout bounds each call to the primary. Redis
	// answers in a millisecond; a second without an answer means it is not
	// there, and waiting longer would hold up every delivery.
	DefaultFallbackPrimaryTimeout = time.Second
)

// fallbackForgetAfter is how long past its lease a holder that was never
// released is remembered: generous, because the local clock the leases are
// tracked by may run ahead of the Redis clock the primary's leases run by.
const fallbackForgetAfter = time.Minute

// FallbackOptions configures a FallbackSemaphore. The zero value is valid.
type FallbackOptions struct {
	// RetryInterval is how long to stay on the local semaphore after the
	// primary failed before trying the primary again. 0 means
	// DefaultFallbackRetryInterval.
	RetryInterval time.Duration
	// PrimaryTimeout bounds each call to the primary; a call that takes
	// longer counts as the primary being unreachable (a Redis behind a
	// network partition does not refuse connections, it just never
	// answers). 0 means DefaultFallbackPrimaryTimeout.
	PrimaryTimeout time.Duration
	// OnFallback, when set, is called once each time the semaphore switches
	// from the primary to the local one, with the primary's error, to log a
	// warning and count the switch. It runs synchronously in the TryAcquire
	// that switched, so it must be quick.
	OnFallback func(err error)
	// OnRecover, when set, is called once each time the semaphore switches
	// back to the primary. Like OnFallback it must be quick.
	OnRecover func()
	// Now is the clock RetryInterval is measured by; nil means time.Now.
	Now func() time.Time
}

// FallbackSemaphore is a ports.Semaphore that keeps deliveries flowing when
// Redis is unreachable (SPEC §3): it uses its primary (the Redis
// Semaphore) while that answers, and when it returns an error switches to a
// local, per-process semaphore with the same limits for RetryInterval, then
// lets one call try the primary again while the others stay local. On the
// local semaphore each process enforces the limit on its own, so a
// subscription may see up to one limit per process: a degraded but bounded
// mode, better than stopping every delivery or dropping the limit
// altogether. Slots taken from one semaphore are not counted by the other
// across a switch.
//
// Release goes to the semaphore the holder acquired from, which the
// FallbackSemaphore remembers per holder until it is released or its lease
// is long over. An error that comes from the caller's own context, or a
// bad argument, does not switch: it says nothing about Redis.
//
// It lives in this package because the Redis semaphore is the one that can
// become unreachable, but it depends only on ports.Semaphore, so it does
// not import the memory adapter: bootstrap passes memory.NewSemaphore as
// the local one. Safe for concurrent use.
type FallbackSemaphore struct {
	primary, local ports.Semaphore
	opts           FallbackOptions

	mu sync.Mutex
	// onLocal is set while the primary is presumed down; retryAt is when
	// to try it again.
	onLocal bool
	retryAt time.Time
	// probing is set while one caller tries the primary again.
	probing bool
	// holders remembers where each holder's slot came from.
	holders map[fallbackHolder]fallbackLease
	sweepAt int
}

var _ ports.Semaphore = (*FallbackSemaphore)(nil)

type fallbackHolder struct{ subscriptionID, holder string }

type fallbackLease struct {
	local   bool
	expires time.Time
}

// fallbackMinSweep is the least number of remembered holders before
// forgotten ones are swept.
const fallbackMinSweep = 1024

// NewFallbackSemaphore returns a FallbackSemaphore using primary while it
// answers and local while it does not. Nil semaphores are a programming
// error and panic.
func NewFallbackSemaphore(primary, local ports.Semaphore, opts FallbackOptions) *FallbackSemaphore {
	if primary == nil || local == nil {
		panic("redis fallback semaphore: primary and local semaphores are required")
	}
	if opts.RetryInterval <= 0 {
		opts.RetryInterval = DefaultFallbackRetryInterval
	}
	if opts.PrimaryTimeout <= 0 {
		opts.PrimaryTimeout = DefaultFallbackPrimaryTimeout
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &FallbackSemaphore{
		primary: primary,
		local:   local,
		opts:    opts,
		holders: make(map[fallbackHolder]fallbackLease),
		sweepAt: fallbackMinSweep,
	}
}

// UsingFallback reports whether the semaphore is currently on its local
// semaphore, for a health check or a gauge.
func (s *FallbackSemaphore) UsingFallback() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.onLocal
}

// TryAcquire takes a slot from the primary, or from the local semaphore
// while the primary is presumed down or when it fails now; see
// ports.Semaphore.
func (s *FallbackSemaphore) TryAcquire(ctx context.Context, subscriptionID, holder string, limit int, ttl time.Duration) (bool, error) {
	if err := checkSemaphoreArgs(subscriptionID, holder, limit, ttl); err != nil {
		return false, fmt.Errorf("redis fallback semaphore: %w", err)
	}
	use, probe := s.primaryDue()
	if !use {
		return s.acquireLocal(ctx, subscriptionID, holder, limit, ttl)
	}
	if probe {
		defer s.probeDone()
	}
	pctx, cancel := context.WithTimeout(ctx, s.opts.PrimaryTimeout)
	ok, err := s.primary.TryAcquire(pctx, subscriptionID, holder, limit, ttl)
	cancel()
	if err == nil {
		s.primaryAnswered()
		if ok {
			s.remember(subscriptionID, holder, false, ttl)
		}
		return ok, nil
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return false, ctxErr
	}
	s.primaryFailed(err)
	return s.acquireLocal(ctx, subscriptionID, holder, limit, ttl)
}

// Release gives holder's slot back to the semaphore it came from. A holder
// this semaphore does not remember has nothing to release (never acquired,
// released already, or its lease long over), so that costs no call. A slot
// from the primary cannot be given back while the primary is presumed down:
// Release then returns an error at once, and the slot comes back when its
// lease ends.
func (s *FallbackSemaphore) Release(ctx context.Context, subscriptionID, holder string) error {
	key := fallbackHolder{subscriptionID, holder}
	s.mu.Lock()
	lease, ok := s.holders[key]
	delete(s.holders, key)
	s.mu.Unlock()
	switch {
	case !ok:
		return nil
	case lease.local:
		return s.local.Release(ctx, subscriptionID, holder)
	case s.UsingFallback():
		// Calling a primary presumed down could block for PrimaryTimeout
		// (a partition) for nothing.
		return fmt.Errorf("redis fallback semaphore: release %s of %s: primary unavailable; the slot comes back when its lease ends", holder, subscriptionID)
	}
	pctx, cancel := context.WithTimeout(ctx, s.opts.PrimaryTimeout)
	defer cancel()
	if err := s.primary.Release(pctx, subscriptionID, holder); err != nil {
		// The slot comes back when its lease runs out.
		return fmt.Errorf("redis fallback semaphore: %w", err)
	}
	return nil
}

func (s *FallbackSemaphore) acquireLocal(ctx context.Context, subscriptionID, holder string, limit int, ttl time.Duration) (bool, error) {
	ok, err := s.local.TryAcquire(ctx, subscriptionID, holder, limit, ttl)
	if err != nil {
		return false, fmt.Errorf("redis fallback semaphore: local: %w", err)
	}
	if ok {
		s.remember(subscriptionID, holder, true, ttl)
	}
	return ok, nil
}

// primaryDue reports whether to ask the primary: always while on it; while
// on the local semaphore, once retryAt has come, one caller at a time
// probes it (probe is then true and the caller calls probeDone), so an
// outage costs one slow call per RetryInterval, not one per delivery.
func (s *FallbackSemaphore) primaryDue() (use, probe bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case !s.onLocal:
		return true, false
	case s.probing || s.opts.Now().Before(s.retryAt):
		return false, false
	}
	s.probing = true
	return true, true
}

// probeDone ends a probe of the primary, whatever came of it.
func (s *FallbackSemaphore) probeDone() {
	s.mu.Lock()
	s.probing = false
	s.mu.Unlock()
}

// primaryAnswered switches back to the primary if the semaphore was on
// the local one.
func (s *FallbackSemaphore) primaryAnswered() {
	s.mu.Lock()
	switched := s.onLocal
	s.onLocal = false
	s.mu.Unlock()
	if switched && s.opts.OnRecover != nil {
		s.opts.OnRecover()
	}
}

// primaryFailed switches to the local semaphore, or, when a retry failed,
// stays there for another RetryInterval.
func (s *FallbackSemaphore) primaryFailed(err error) {
	s.mu.Lock()
	switched := !s.onLocal
	s.onLocal = true
	s.retryAt = s.opts.Now().Add(s.opts.RetryInterval)
	s.mu.Unlock()
	if switched && s.opts.OnFallback != nil {
		s.opts.OnFallback(err)
	}
}

// remember records where holder's slot came from, and now and then forgets
// holders whose lease is long over, so holders never released do not
// accumulate.
func (s *FallbackSemaphore) remember(subscriptionID, holder string, local bool, ttl time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.opts.Now()
	s.holders[fallbackHolder{subscriptionID, holder}] = fallbackLease{local: local, expires: now.Add(ttl)}
	if len(s.holders) < s.sweepAt {
		return
	}
	for k, l := range s.holders {
		if now.Sub(l.expires) > fallbackForgetAfter {
			delete(s.holders, k)
		}
	}
	s.sweepAt = max(2*len(s.holders), fallbackMinSweep)
}
