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

// Protection answers a subscription's three protections together, for an
// adapter that can do it cheaper than one call each (one Redis round trip
// instead of three). It is optional: application.Deliver uses it when it
// is set and falls back to the separate ports when it fails, so it shares
// their state (a breaker opened through Breakers refuses here, a slot
// taken here counts for Semaphore, and so on). Safe for concurrent use.
type Protection interface {
	// Admit asks the breaker, the rate limiter and the semaphore in that
	// order, exactly as Breakers.Allow, RateLimiter.Take and
	// Semaphore.TryAcquire would, stopping at the first that refuses: what
	// the ones before it took stays taken (a half-open probe, a request
	// from the budget), what comes after is not asked. When Admitted.Refused
	// is RefusedByNone, holder has a slot until Finish or until its lease
	// ends. On error the adapter took nothing it knows of; a slot taken by
	// a call whose answer was lost comes back when its lease ends.
	Admit(ctx context.Context, req Admission) (Admitted, error)
	// Finish ends a request Admit let through: it gives holder's slot
	// back (as Semaphore.Release) and records its result on the breaker
	// (as Breakers.Record), and returns the breaker's new state. A holder
	// without a slot is not an error. On error the result may not be
	// recorded, and the slot comes back when its lease ends.
	Finish(ctx context.Context, subscriptionID, holder string, cfg domain.BreakerConfig, success bool, now time.Time) (domain.Breaker, error)
}

// Admission is what Protection.Admit is asked.
type Admission struct {
	// SubscriptionID names the endpoint.
	SubscriptionID string
	// Holder is a unique name of this request, as for Semaphore.TryAcquire.
	Holder string
	// Breaker configures the circuit breaker; Now is the time it decides
	// at, as for Breakers.Allow.
	Breaker domain.BreakerConfig
	Now     time.Time
	// PerSecond is the rate limit, as for RateLimiter.Take.
	PerSecond int
	// MaxInFlight and Lease are the slot limit and the lease's length, as
	// for Semaphore.TryAcquire.
	MaxInFlight int
	Lease       time.Duration
}

// Refusal names the protection that refused a request.
type Refusal int

// The protections, in the order Admit asks them.
const (
	// RefusedByNone: every protection let the request through.
	RefusedByNone Refusal = iota
	// RefusedByBreaker: the circuit is open (or its probes are all out).
	RefusedByBreaker
	// RefusedByRateLimit: the rate limit's budget is spent.
	RefusedByRateLimit
	// RefusedBySemaphore: every slot is taken.
	RefusedBySemaphore
)

// Admitted is Protection.Admit's answer.
type Admitted struct {
	// Refused names the protection that said no, or RefusedByNone.
	Refused Refusal
	// RetryAt, when the breaker refused, is when to try again (as
	// Breakers.Allow's retryAt).
	RetryAt time.Time
	// RetryAfter, when the rate limit refused, is when a request will next
	// be allowed (as RateLimiter.Take's retryAfter).
	RetryAfter time.Duration
}
