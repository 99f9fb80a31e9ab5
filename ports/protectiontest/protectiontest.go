// Package protectiontest is the contract test suite of ports.Protection.
// Every adapter runs it (the watermill pubsub/tests idea), with a Features
// value for what differs between adapters:
//
//	func TestProtection(t *testing.T) {
//		protectiontest.RunProtection(t, func(t *testing.T) ports.Protection { return newProtection(t) },
//			protectiontest.Features{RateBurst: RateBurst})
//	}
//
// The breaker decides at the time it is given, so its tests need no clock.
// The rate limit and the slots' leases run by the adapter's own clock
// (Redis's TIME, or the process's): the suite runs in real time, with
// budgets and leases long enough not to refill or end during a test, and
// polls with a deadline for what must happen (a lease ending).
//
// Rule of dependency: imports domain, ports, the standard library and
// testify; no adapter. Adapters import it from their tests.
package protectiontest

import (
	"context"
	"testing"
	"time"
)

// Features says what an adapter can do for the suite beyond the port.
type Features struct {
	// RateBurst is the burst the adapter documents for perSecond: how
	// many requests it lets through at once. Required.
	RateBurst func(perSecond int) int
}

// waitFor bounds every poll; generous for a loaded CI machine.
const waitFor = 10 * time.Second

// Subscriptions the suite uses; each test has its own adapter (or key
// prefix), so they never collide between tests.
const (
	subA = "sub-a"
	subB = "sub-b"
)

// t0 is where breaker tests start; an odd nanosecond count checks that the
// adapter keeps the breaker's times exactly.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.UTC)

// longLease outlives every test: a slot taken with it is held until
// Finish.
const longLease = time.Minute

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 2*waitFor)
	t.Cleanup(cancel)
	return ctx
}
