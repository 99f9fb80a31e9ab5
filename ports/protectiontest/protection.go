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

// RunProtection runs the contract suite of ports.Protection: Admit asks
// the breaker, the rate limit and the slots in order, stopping at the
// first refusal; Finish gives the slot back and records the result; the
// bounds are exact; a slot whose Finish never came comes back when its
// lease ends. newProtection returns a fresh Protection (every breaker
// closed, every budget full, every slot free) for one test; tests run in
// parallel. Features.RateBurst is required.
func RunProtection(t *testing.T, newProtection func(t *testing.T) ports.Protection, features Features) {
	t.Helper()
	require.NotNil(t, features.RateBurst, "protectiontest: Features.RateBurst is required")
	s := protectionSuite{newProtection: newProtection, f: features}
	tests := []struct {
		name string
		fn   func(t *testing.T)
	}{
		{"AdmitTakesASlotFinishGivesItBack", s.testAdmitTakesASlotFinishGivesItBack},
		{"RateLimitExactBurst", s.testRateLimitExactBurst},
		{"RateLimitRefusalTakesNoSlot", s.testRateLimitRefusalTakesNoSlot},
		{"OpenBreakerRefusesAndTakesNothing", s.testOpenBreakerRefusesAndTakesNothing},
		{"HalfOpenProbes", s.testHalfOpenProbes},
		{"ProbeFailureReopens", s.testProbeFailureReopens},
		{"FailuresOpenSuccessResets", s.testFailuresOpenSuccessResets},
		{"FinishWithoutSlot", s.testFinishWithoutSlot},
		{"ConcurrentAdmitsCapped", s.testConcurrentAdmitsCapped},
		{"LostFinishSlotComesBackAtLeaseEnd", s.testLostFinishSlotComesBackAtLeaseEnd},
		{"SubscriptionsAreIndependent", s.testSubscriptionsAreIndependent},
		{"BadArguments", s.testBadArguments},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t)
		})
	}
}

type protectionSuite struct {
	newProtection func(t *testing.T) ports.Protection
	f             Features
}

// Generous limits for tests about something else.
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

// open opens sub's breaker at now with FailureThreshold failed requests
// and returns its state.
func open(t *testing.T, p ports.Protection, sub string, cfg domain.BreakerConfig, now time.Time) domain.Breaker {
	t.Helper()
	var state domain.Breaker
	for i := range cfg.FailureThreshold {
		holder := fmt.Sprint("fail", i)
		require.Equal(t, ports.RefusedByNone, admit(t, p, admission(sub, holder, manyPerSecond, manySlots, now)).Refused)
		state = finish(t, p, sub, holder, cfg, false, now)
	}
	require.Equal(t, domain.BreakerOpen, state.Phase)
	return state
}

func (s protectionSuite) testAdmitTakesASlotFinishGivesItBack(t *testing.T) {
	p := s.newProtection(t)
	require.Equal(t, ports.RefusedByNone, admit(t, p, admission(subA, "h1", manyPerSecond, 2, t0)).Refused)
	require.Equal(t, ports.RefusedByNone, admit(t, p, admission(subA, "h2", manyPerSecond, 2, t0)).Refused)
	assert.Equal(t, ports.RefusedBySemaphore, admit(t, p, admission(subA, "h3", manyPerSecond, 2, t0)).Refused, "both slots are taken")
	state := finish(t, p, subA, "h1", domain.DefaultBreakerConfig(), true, t0)
	assert.Equal(t, domain.BreakerClosed, state.Phase)
	assert.Equal(t, ports.RefusedByNone, admit(t, p, admission(subA, "h3", manyPerSecond, 2, t0)).Refused, "Finish gave the slot back")
}

func (s protectionSuite) testRateLimitExactBurst(t *testing.T) {
	p := s.newProtection(t)
	const perSecond = 1
	burst := s.f.RateBurst(perSecond)
	for i := range burst {
		res := admit(t, p, admission(subA, fmt.Sprint("h", i), perSecond, manySlots, t0))
		require.Equal(t, ports.RefusedByNone, res.Refused, "request %d of a burst of %d", i+1, burst)
	}
	res := admit(t, p, admission(subA, "over", perSecond, manySlots, t0))
	require.Equal(t, ports.RefusedByRateLimit, res.Refused, "the burst is spent")
	assert.Positive(t, res.RetryAfter)
	assert.LessOrEqual(t, res.RetryAfter, time.Second, "one request a second comes back within a second")
}

func (s protectionSuite) testRateLimitRefusalTakesNoSlot(t *testing.T) {
	p := s.newProtection(t)
	const perSecond = 1
	for i := range s.f.RateBurst(perSecond) {
		holder := fmt.Sprint("h", i)
		require.Equal(t, ports.RefusedByNone, admit(t, p, admission(subA, holder, perSecond, 1, t0)).Refused)
		finish(t, p, subA, holder, domain.DefaultBreakerConfig(), true, t0)
	}
	res := admit(t, p, admission(subA, "refused", perSecond, 1, t0))
	require.Equal(t, ports.RefusedByRateLimit, res.Refused)
	// Once the budget refills, the one slot is free: the refusal took none.
	deadline := time.Now().Add(waitFor)
	for {
		res = admit(t, p, admission(subA, "later", perSecond, 1, t0))
		if res.Refused != ports.RefusedByRateLimit || time.Now().After(deadline) {
			break
		}
		time.Sleep(min(res.RetryAfter, 100*time.Millisecond))
	}
	assert.Equal(t, ports.RefusedByNone, res.Refused, "a rate limit refusal took no slot")
}

func (s protectionSuite) testOpenBreakerRefusesAndTakesNothing(t *testing.T) {
	p := s.newProtection(t)
	cfg := domain.DefaultBreakerConfig()
	opened := open(t, p, subA, cfg, t0)
	res := admit(t, p, admission(subA, "h", manyPerSecond, 1, t0.Add(time.Second)))
	require.Equal(t, ports.RefusedByBreaker, res.Refused)
	assert.True(t, res.RetryAt.Equal(opened.OpenUntil), "retry at %s, want the end of the open period %s", res.RetryAt, opened.OpenUntil)
	res = admit(t, p, admission(subA, "probe", manyPerSecond, 1, opened.OpenUntil))
	assert.Equal(t, ports.RefusedByNone, res.Refused, "the open breaker's refusal took no slot")
}

func (s protectionSuite) testHalfOpenProbes(t *testing.T) {
	p := s.newProtection(t)
	cfg := domain.DefaultBreakerConfig()
	at := open(t, p, subA, cfg, t0).OpenUntil
	for i := range cfg.HalfOpenProbes {
		res := admit(t, p, admission(subA, fmt.Sprint("probe", i), manyPerSecond, manySlots, at))
		require.Equal(t, ports.RefusedByNone, res.Refused, "probe %d of %d", i+1, cfg.HalfOpenProbes)
	}
	res := admit(t, p, admission(subA, "one-too-many", manyPerSecond, manySlots, at))
	require.Equal(t, ports.RefusedByBreaker, res.Refused, "every probe is out")
	assert.True(t, res.RetryAt.After(at), "a refused probe says when to come back")

	state := finish(t, p, subA, "probe0", cfg, true, at)
	assert.Equal(t, domain.BreakerClosed, state.Phase, "a probe's success closes the circuit")
	assert.Equal(t, ports.RefusedByNone, admit(t, p, admission(subA, "after", manyPerSecond, manySlots, at)).Refused)
}

func (s protectionSuite) testProbeFailureReopens(t *testing.T) {
	p := s.newProtection(t)
	cfg := domain.DefaultBreakerConfig()
	at := open(t, p, subA, cfg, t0).OpenUntil
	require.Equal(t, ports.RefusedByNone, admit(t, p, admission(subA, "probe", manyPerSecond, manySlots, at)).Refused)
	failedAt := at.Add(time.Second)
	state := finish(t, p, subA, "probe", cfg, false, failedAt)
	require.Equal(t, domain.BreakerOpen, state.Phase, "a probe's failure reopens the circuit")
	assert.True(t, state.OpenUntil.Equal(failedAt.Add(cfg.OpenDuration)))
	res := admit(t, p, admission(subA, "h", manyPerSecond, manySlots, failedAt))
	require.Equal(t, ports.RefusedByBreaker, res.Refused)
	assert.True(t, res.RetryAt.Equal(failedAt.Add(cfg.OpenDuration)))
}

func (s protectionSuite) testFailuresOpenSuccessResets(t *testing.T) {
	p := s.newProtection(t)
	cfg := domain.DefaultBreakerConfig()
	for i := range cfg.FailureThreshold - 1 {
		holder := fmt.Sprint("h", i)
		require.Equal(t, ports.RefusedByNone, admit(t, p, admission(subA, holder, manyPerSecond, manySlots, t0)).Refused)
		state := finish(t, p, subA, holder, cfg, false, t0)
		require.Equal(t, domain.BreakerClosed, state.Phase)
		require.Equal(t, i+1, state.Failures)
	}
	require.Equal(t, ports.RefusedByNone, admit(t, p, admission(subA, "ok", manyPerSecond, manySlots, t0)).Refused,
		"a closed breaker with failures still allows")
	state := finish(t, p, subA, "ok", cfg, true, t0)
	require.Equal(t, domain.Breaker{Phase: domain.BreakerClosed}, state, "a success resets the failures")

	state = open(t, p, subA, cfg, t0)
	assert.True(t, state.OpenUntil.Equal(t0.Add(cfg.OpenDuration)), "%d failures in a row open the circuit", cfg.FailureThreshold)
	assert.Equal(t, ports.RefusedByBreaker, admit(t, p, admission(subA, "late", manyPerSecond, manySlots, t0)).Refused)
}

func (s protectionSuite) testFinishWithoutSlot(t *testing.T) {
	p := s.newProtection(t)
	state := finish(t, p, subA, "never-admitted", domain.DefaultBreakerConfig(), true, t0)
	assert.Equal(t, domain.BreakerClosed, state.Phase)
	require.Equal(t, ports.RefusedByNone, admit(t, p, admission(subA, "h", manyPerSecond, 1, t0)).Refused)
	finish(t, p, subA, "h", domain.DefaultBreakerConfig(), true, t0)
	finish(t, p, subA, "h", domain.DefaultBreakerConfig(), true, t0) // twice is not an error
	assert.Equal(t, ports.RefusedByNone, admit(t, p, admission(subA, "other", manyPerSecond, 1, t0)).Refused)
}

func (s protectionSuite) testConcurrentAdmitsCapped(t *testing.T) {
	p := s.newProtection(t)
	const callers, slots = 40, 7
	var mu sync.Mutex
	refused := map[ports.Refusal]int{}
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			res, err := p.Admit(ctxFor(t), admission(subA, fmt.Sprint("h", i), manyPerSecond, slots, t0))
			if !assert.NoError(t, err) {
				return
			}
			mu.Lock()
			refused[res.Refused]++
			mu.Unlock()
		})
	}
	wg.Wait()
	assert.Equal(t, map[ports.Refusal]int{ports.RefusedByNone: slots, ports.RefusedBySemaphore: callers - slots}, refused,
		"exactly MaxInFlight slots among concurrent Admits")
}

func (s protectionSuite) testLostFinishSlotComesBackAtLeaseEnd(t *testing.T) {
	p := s.newProtection(t)
	const lease = 200 * time.Millisecond
	req := admission(subA, "lost", manyPerSecond, 1, t0)
	req.Lease = lease
	require.Equal(t, ports.RefusedByNone, admit(t, p, req).Refused)
	taken := time.Now()
	// Its Finish never comes. Until its lease ends the slot is taken.
	res := admit(t, p, admission(subA, "next", manyPerSecond, 1, t0))
	if time.Since(taken) < lease {
		require.Equal(t, ports.RefusedBySemaphore, res.Refused, "the slot is held until its lease ends")
	}
	deadline := time.Now().Add(waitFor)
	for res.Refused == ports.RefusedBySemaphore && time.Now().Before(deadline) {
		time.Sleep(lease / 10)
		res = admit(t, p, admission(subA, "next", manyPerSecond, 1, t0))
	}
	assert.Equal(t, ports.RefusedByNone, res.Refused, "the slot came back when its lease ended")
}

func (s protectionSuite) testSubscriptionsAreIndependent(t *testing.T) {
	p := s.newProtection(t)
	cfg := domain.DefaultBreakerConfig()
	open(t, p, subA, cfg, t0)
	for i := range s.f.RateBurst(1) {
		admit(t, p, admission(subA, fmt.Sprint("spend", i), 1, manySlots, t0.Add(cfg.OpenDuration)))
	}
	res := admit(t, p, admission(subB, "h", 1, 1, t0))
	assert.Equal(t, ports.RefusedByNone, res.Refused, "sub-b is not held back by sub-a's breaker, budget or slots")
}

func (s protectionSuite) testBadArguments(t *testing.T) {
	p := s.newProtection(t)
	good := admission(subA, "h", manyPerSecond, 1, t0)
	for name, change := range map[string]func(*ports.Admission){
		"rate below 1":  func(r *ports.Admission) { r.PerSecond = 0 },
		"no holder":     func(r *ports.Admission) { r.Holder = "" },
		"no slot":       func(r *ports.Admission) { r.MaxInFlight = 0 },
		"lease not > 0": func(r *ports.Admission) { r.Lease = 0 },
	} {
		req := good
		change(&req)
		_, err := p.Admit(ctxFor(t), req)
		assert.Error(t, err, name)
	}
	assert.Equal(t, ports.RefusedByNone, admit(t, p, good).Refused, "bad arguments took nothing")
}
