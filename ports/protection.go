package ports

import (
	"context"
	"time"

	"github.com/dispatch-webhooks/dispatch/domain"
)

// Protection keeps each subscription's endpoint protections, shared by
// every worker that uses the same store: a circuit breaker (the state
// machine is domain.Breaker), a rate limit and a cap on requests in
// flight. Safe for concurrent use.
//
// The bounds are exact: among the requests Admit lets through for a
// subscription, at most PerSecond + the adapter's documented burst start
// in any 1-second window of the adapter's clock, and at most MaxInFlight
// hold a slot at once. A slot is leased: a holder whose Finish never
// comes (its worker died, its answer was lost) loses it when its lease
// ends, and only then does it come back.
type Protection interface {
	// Admit asks the breaker, the rate limit and the slots in that order,
	// stopping at the first that refuses: what the ones before it took
	// stays taken (a half-open probe, a request from the budget), what
	// comes after is not asked. When Admitted.Refused is RefusedByNone,
	// holder has a slot until Finish or until its lease ends. On error the
	// adapter took nothing it knows of; a slot taken by a call whose
	// answer was lost comes back when its lease ends.
	Admit(ctx context.Context, req Admission) (Admitted, error)
	// Finish ends a request Admit let through: it gives holder's slot
	// back and records its result on the breaker (domain.Breaker.Record at
	// now), and returns the breaker's new state. A holder without a slot
	// is not an error. On error the result may not be recorded, and the
	// slot comes back when its lease ends.
	Finish(ctx context.Context, subscriptionID, holder string, cfg domain.BreakerConfig, success bool, now time.Time) (domain.Breaker, error)
}

// Admission is what Protection.Admit is asked.
type Admission struct {
	// SubscriptionID names the endpoint.
	SubscriptionID string
	// Holder is a unique name of this request; taking a slot for a holder
	// that has one renews its lease.
	Holder string
	// Breaker configures the circuit breaker; Now is the time it decides
	// at (domain.Breaker.Allow).
	Breaker domain.BreakerConfig
	Now     time.Time
	// PerSecond is the rate limit, at least 1.
	PerSecond int
	// MaxInFlight (at least 1) and Lease (positive) are the slot limit and
	// a slot's lease.
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
	// RetryAt, when the breaker refused, is when to try again.
	RetryAt time.Time
	// RetryAfter, when the rate limit refused, is how long until a request
	// will next be allowed.
	RetryAfter time.Duration
}
