package protectiontest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// ProtectionSet is a ports.Protection and the separate ports whose state it
// shares, for RunProtection.
type ProtectionSet struct {
	Protection ports.Protection
	Breakers   ports.Breakers
	Limiter    ports.RateLimiter
	Semaphore  ports.Semaphore
}

// RunProtection runs the contract suite of ports.Protection: that Admit
// and Finish do what the separate ports would, in order, stopping at the
// first refusal, and share their state. newSet returns a fresh set for one
// test; tests run in parallel. The suite runs in real time (the clocks the
// budgets and leases run by are not moved) with budgets and leases long
// enough not to refill or run out during a test. Features.RateBurst is
// required.
func RunProtection(t *testing.T, newSet func(t *testing.T) ProtectionSet, features Features) {
	t.Helper()
	require.NotNil(t, features.RateBurst, "protectiontest: Features.RateBurst is required to test a protection")
	s := protectionSuite{newSet: newSet, f: features}
	tests := []struct {
		name string
		fn   func(t *testing.T)
	}{
		{"AdmitTakesFromEach", s.testAdmitTakesFromEach},
		{"OpenBreakerRefusesAndTakesNothing", s.testOpenBreakerRefusesAndTakesNothing},
		{"HalfOpenProbes", s.testHalfOpenProbes},
		{"ProbeFailureReopens", s.testProbeFailureReopens},
		{"FailuresOpenSuccessResets", s.testFailuresOpenSuccessResets},
		{"RateLimitRefusesTakesNoSlot", s.testRateLimitRefusesTakesNoSlot},
		{"FullSlotsRefuse", s.testFullSlotsRefuse},
		{"FinishWithoutSlot", s.testFinishWithoutSlot},
		{"ConcurrentAdmitsCapped", s.testConcurrentAdmitsCapped},
		{"SubscriptionsAreIndependent", s.testSubscriptionsAreIndependent},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t)
		})
	}
}

type protectionSuite struct {
	newSet func(t *testing.T) ProtectionSet
	f      Features
}

// Generous limits for tests about something else (leases are the
// semaphore suite's longLease).
const (
	manyPerSecond = domain.MaxRateLimit
	manySlots     = 1000
)

func admission(sub, holder string, perSecond, slots int, now time.Time) ports.Admission {
	return ports.Admission{
		SubscriptionID: sub, Holder: holder, Breaker: domain.DefaultBreakerConfig(), Now: now,
		PerSecond: perSecond, MaxInFlight: slots, Lease: longLease,
	}
}

// admit calls Admit and fails the test on an error.
func admit(t *testing.T, p ports.Protection, req ports.Admission) ports.Admitted {
	t.Helper()
	res, err := p.Admit(ctxFor(t), req)
	require.NoError(t, err)
	return res
}

// finish calls Finish and fails the test on an error.
func finish(t *testing.T, p ports.Protection, sub, holder string, cfg domain.BreakerConfig, success bool, now time.Time) domain.Breaker {
	t.Helper()
	s, err := p.Finish(ctxFor(t), sub, holder, cfg, success, now)
	require.NoError(t, err)
	return s
}

func (s protectionSuite) testAdmitTakesFromEach(t *testing.T) {
	set := s.newSet(t)
	burst := s.f.RateBurst(1)
	for i := range burst {
		res := admit(t, set.Protection, admission(subA, fmt.Sprint("h", i), 1, burst, t0))
		require.Equal(t, ports.RefusedByNone, res.Refused, "request %d of a burst of %d", i+1, burst)
	}
	ok, _ := take(t, set.Limiter, subA, 1)
	assert.False(t, ok, "Admit took from the rate limit's budget")
	assert.False(t, acquire(t, set.Semaphore, subA, "other", burst, longLease), "Admit took the slots")

	state := finish(t, set.Protection, subA, "h0", domain.DefaultBreakerConfig(), true, t0)
	assert.Equal(t, domain.BreakerClosed, state.Phase)
	assert.True(t, acquire(t, set.Semaphore, subA, "other", burst, longLease), "Finish gave the slot back")
	ok, _ = allow(t, set.Breakers, subA, domain.DefaultBreakerConfig(), t0)
	assert.True(t, ok, "the breaker stays closed")
}

func (s protectionSuite) testOpenBreakerRefusesAndTakesNothing(t *testing.T) {
	set := s.newSet(t)
	cfg := domain.DefaultBreakerConfig()
	opened := open(t, set.Breakers, subA, cfg, t0)
	res := admit(t, set.Protection, admission(subA, "h", 1, 1, t0.Add(time.Second)))
	require.Equal(t, ports.RefusedByBreaker, res.Refused)
	assert.True(t, res.RetryAt.Equal(opened.OpenUntil), "retry at %s, want the end of the open period %s", res.RetryAt, opened.OpenUntil)
	ok, _ := take(t, set.Limiter, subA, 1)
	assert.True(t, ok, "an open breaker's refusal took from the rate limit")
	assert.True(t, acquire(t, set.Semaphore, subA, "other", 1, longLease), "an open breaker's refusal took a slot")
}

func (s protectionSuite) testHalfOpenProbes(t *testing.T) {
	set := s.newSet(t)
	cfg := domain.DefaultBreakerConfig()
	opened := open(t, set.Breakers, subA, cfg, t0)
	at := opened.OpenUntil
	for i := range cfg.HalfOpenProbes {
		res := admit(t, set.Protection, admission(subA, fmt.Sprint("probe", i), manyPerSecond, manySlots, at))
		require.Equal(t, ports.RefusedByNone, res.Refused, "probe %d of %d", i+1, cfg.HalfOpenProbes)
	}
	res := admit(t, set.Protection, admission(subA, "one-too-many", manyPerSecond, manySlots, at))
	require.Equal(t, ports.RefusedByBreaker, res.Refused, "every probe is out")
	assert.True(t, res.RetryAt.After(at), "a refused probe says when to come back")

	state := finish(t, set.Protection, subA, "probe0", cfg, true, at)
	assert.Equal(t, domain.BreakerClosed, state.Phase, "a probe's success closes the circuit")
	ok, _ := allow(t, set.Breakers, subA, cfg, at)
	assert.True(t, ok)
}

func (s protectionSuite) testProbeFailureReopens(t *testing.T) {
	set := s.newSet(t)
	cfg := domain.DefaultBreakerConfig()
	opened := open(t, set.Breakers, subA, cfg, t0)
	at := opened.OpenUntil
	require.Equal(t, ports.RefusedByNone, admit(t, set.Protection, admission(subA, "probe", manyPerSecond, manySlots, at)).Refused)
	failedAt := at.Add(time.Second)
	state := finish(t, set.Protection, subA, "probe", cfg, false, failedAt)
	require.Equal(t, domain.BreakerOpen, state.Phase, "a probe's failure reopens the circuit")
	assert.True(t, state.OpenUntil.Equal(failedAt.Add(cfg.OpenDuration)))
	ok, retryAt := allow(t, set.Breakers, subA, cfg, failedAt)
	assert.False(t, ok)
	assert.True(t, retryAt.Equal(failedAt.Add(cfg.OpenDuration)))
}

func (s protectionSuite) testFailuresOpenSuccessResets(t *testing.T) {
	set := s.newSet(t)
	cfg := domain.DefaultBreakerConfig()
	for i := range cfg.FailureThreshold - 1 {
		holder := fmt.Sprint("h", i)
		require.Equal(t, ports.RefusedByNone, admit(t, set.Protection, admission(subA, holder, manyPerSecond, manySlots, t0)).Refused)
		state := finish(t, set.Protection, subA, holder, cfg, false, t0)
		require.Equal(t, domain.BreakerClosed, state.Phase)
		require.Equal(t, i+1, state.Failures)
	}
	require.Equal(t, ports.RefusedByNone, admit(t, set.Protection, admission(subA, "ok", manyPerSecond, manySlots, t0)).Refused,
		"a closed breaker with failures still allows")
	state := finish(t, set.Protection, subA, "ok", cfg, true, t0)
	require.Equal(t, domain.Breaker{Phase: domain.BreakerClosed}, state, "a success resets the failures")

	for i := range cfg.FailureThreshold {
		holder := fmt.Sprint("f", i)
		require.Equal(t, ports.RefusedByNone, admit(t, set.Protection, admission(subA, holder, manyPerSecond, manySlots, t0)).Refused)
		state = finish(t, set.Protection, subA, holder, cfg, false, t0)
	}
	require.Equal(t, domain.BreakerOpen, state.Phase, "%d failures in a row open the circuit", cfg.FailureThreshold)
	assert.True(t, state.OpenUntil.Equal(t0.Add(cfg.OpenDuration)))
	res := admit(t, set.Protection, admission(subA, "late", manyPerSecond, manySlots, t0))
	assert.Equal(t, ports.RefusedByBreaker, res.Refused)
	ok, _ := allow(t, set.Breakers, subA, cfg, t0)
	assert.False(t, ok, "the separate breaker sees the circuit Finish opened")
}

func (s protectionSuite) testRateLimitRefusesTakesNoSlot(t *testing.T) {
	set := s.newSet(t)
	spend(t, set.Limiter, subA, 1)
	res := admit(t, set.Protection, admission(subA, "h", 1, 1, t0))
	require.Equal(t, ports.RefusedByRateLimit, res.Refused, "the budget the separate limiter spent is spent for Admit too")
	assert.Positive(t, res.RetryAfter)
	assert.LessOrEqual(t, res.RetryAfter, time.Second)
	assert.True(t, acquire(t, set.Semaphore, subA, "other", 1, longLease), "a rate limit refusal took a slot")
}

func (s protectionSuite) testFullSlotsRefuse(t *testing.T) {
	set := s.newSet(t)
	require.True(t, acquire(t, set.Semaphore, subA, "other", 1, longLease))
	res := admit(t, set.Protection, admission(subA, "h", manyPerSecond, 1, t0))
	require.Equal(t, ports.RefusedBySemaphore, res.Refused, "the slot the separate semaphore holds counts")
	release(t, set.Semaphore, subA, "other")
	res = admit(t, set.Protection, admission(subA, "h", manyPerSecond, 1, t0))
	require.Equal(t, ports.RefusedByNone, res.Refused)
	assert.False(t, acquire(t, set.Semaphore, subA, "other", 1, longLease), "the separate semaphore sees the slot Admit took")
	release(t, set.Semaphore, subA, "h")
	assert.True(t, acquire(t, set.Semaphore, subA, "other", 1, longLease), "the separate semaphore releases a slot Admit took")
}

func (s protectionSuite) testFinishWithoutSlot(t *testing.T) {
	set := s.newSet(t)
	state := finish(t, set.Protection, subA, "never-admitted", domain.DefaultBreakerConfig(), true, t0)
	assert.Equal(t, domain.BreakerClosed, state.Phase)
	require.Equal(t, ports.RefusedByNone, admit(t, set.Protection, admission(subA, "h", manyPerSecond, 1, t0)).Refused)
	finish(t, set.Protection, subA, "h", domain.DefaultBreakerConfig(), true, t0)
	finish(t, set.Protection, subA, "h", domain.DefaultBreakerConfig(), true, t0) // twice is not an error
	assert.True(t, acquire(t, set.Semaphore, subA, "other", 1, longLease))
}

func (s protectionSuite) testConcurrentAdmitsCapped(t *testing.T) {
	set := s.newSet(t)
	const callers, slots = 40, 7
	var mu sync.Mutex
	refused := map[ports.Refusal]int{}
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			res, err := set.Protection.Admit(ctxFor(t), admission(subA, fmt.Sprint("h", i), manyPerSecond, slots, t0))
			if !assert.NoError(t, err) {
				return
			}
			mu.Lock()
			refused[res.Refused]++
			mu.Unlock()
		})
	}
	wg.Wait()
	assert.Equal(t, map[ports.Refusal]int{ports.RefusedByNone: slots, ports.RefusedBySemaphore: callers - slots}, refused)
}

func (s protectionSuite) testSubscriptionsAreIndependent(t *testing.T) {
	set := s.newSet(t)
	cfg := domain.DefaultBreakerConfig()
	open(t, set.Breakers, subA, cfg, t0)
	require.True(t, acquire(t, set.Semaphore, subA, "other", 1, longLease))
	spend(t, set.Limiter, subA, 1)
	res := admit(t, set.Protection, admission(subB, "h", 1, 1, t0))
	assert.Equal(t, ports.RefusedByNone, res.Refused, "sub-b is not held back by sub-a's breaker, budget or slots")
}
