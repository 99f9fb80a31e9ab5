package ports

import (
	"context"
	"time"

	"github.com/dispatch-webhooks/dispatch/domain"
)

// Breakers keeps each subscription's circuit breaker, shared by every
// worker. The state machine is domain.Breaker; an adapter only stores it and
// applies transitions atomically. All methods are safe for concurrent use.
type Breakers interface {
	// Allow applies domain.Breaker.Allow to subscriptionID's breaker at now
	// and stores the result atomically with respect to other calls for the
	// same subscription. When allowed is false, retryAt is when to try
	// again. A subscription never seen has a closed breaker.
	Allow(ctx context.Context, subscriptionID string, cfg domain.BreakerConfig, now time.Time) (allowed bool, retryAt time.Time, err error)
	// Record applies domain.Breaker.Record for one finished request and
	// stores the result atomically; it returns the new state.
	Record(ctx context.Context, subscriptionID string, cfg domain.BreakerConfig, success bool, now time.Time) (domain.Breaker, error)
}

// RateLimiter spaces requests to each subscription, shared by every worker.
// Safe for concurrent use.
type RateLimiter interface {
	// Take takes one request from subscriptionID's budget of perSecond
	// requests a second (with a small burst the adapter documents). When
	// allowed is false nothing was taken and retryAfter says when a request
	// will next be allowed.
	Take(ctx context.Context, subscriptionID string, perSecond int) (allowed bool, retryAfter time.Duration, err error)
}

// Semaphore caps each subscription's requests in flight, shared by every
// worker. Each slot is leased: a holder that dies without releasing loses
// its slot when the lease runs out. Safe for concurrent use.
type Semaphore interface {
	// TryAcquire takes one of subscriptionID's limit slots for holder (a
	// unique name of this request) until ttl passes, or returns false at
	// once when all are taken. Slots whose lease ran out do not count.
	TryAcquire(ctx context.Context, subscriptionID, holder string, limit int, ttl time.Duration) (bool, error)
	// Release gives holder's slot back; releasing a slot that is not held
	// (already released, or its lease ran out) is not an error.
	Release(ctx context.Context, subscriptionID, holder string) error
}
