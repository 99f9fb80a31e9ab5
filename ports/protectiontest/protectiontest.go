// Package protectiontest is the contract test suite of the delivery
// protections, ports.Breakers, ports.RateLimiter and ports.Semaphore. Every
// adapter runs it (the watermill pubsub/tests idea): one suite per port,
// with a Features value for what differs between adapters.
//
//	func TestSemaphore(t *testing.T) {
//		protectiontest.RunSemaphore(t, func(t *testing.T) ports.Semaphore { return newSemaphore(t) }, protectiontest.Features{})
//	}
//
// Breakers take the time as an argument, so their suite needs no clock. The
// rate limiter and the semaphore read their own clock (Redis's TIME, or an
// injected one); an adapter whose clock the test controls passes the
// Advance hooks, and the suite checks exact budgets and lease ends.
// Without them the suite runs in real time with short durations, polling
// with a deadline, and checks bounds instead.
//
// Rule of dependency: imports domain, ports, the standard library and
// testify; no adapter. Adapters import it from their tests.
package protectiontest

import (
	"context"
	"testing"
	"time"

	"github.com/dispatch-webhooks/dispatch/ports"
)

// Features says what an adapter can do for the suite beyond the port.
type Features struct {
	// AdvanceRateLimiter, when set, moves the clock l (as the suite's new
	// function returned it) refills by, by d. The clock must not move by
	// itself in between: the suite then checks budgets exactly. When nil
	// the suite uses real time.
	AdvanceRateLimiter func(t *testing.T, l ports.RateLimiter, d time.Duration)
	// AdvanceSemaphore, when set, moves the clock s (as the suite's new
	// function returned it) measures leases by, by d. The clock must not
	// move by itself in between: the suite then checks lease ends exactly.
	// When nil the suite uses real time.
	AdvanceSemaphore func(t *testing.T, s ports.Semaphore, d time.Duration)
	// RateBurst is the burst the rate limiter documents for perSecond: how
	// many requests it lets through at once. RunRateLimiter requires it.
	RateBurst func(perSecond int) int
}

// waitFor bounds every poll; generous for a loaded CI machine.
const waitFor = 10 * time.Second

// Subscriptions the suites use; each test has its own adapter (or key
// prefix), so they never collide between tests.
const (
	subA = "sub-a"
	subB = "sub-b"
)

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 2*waitFor)
	t.Cleanup(cancel)
	return ctx
}

// pollEvery paces polls in real time: often enough to notice a change
// promptly, rarely enough not to hammer the adapter.
func pollEvery(expected time.Duration) time.Duration {
	return min(max(expected/10, time.Millisecond), 20*time.Millisecond)
}
