package protectiontest

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// t0 is where breaker tests start; an odd nanosecond count checks that the
// adapter keeps OpenUntil exactly.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.UTC)

// RunBreakers runs the contract suite of ports.Breakers. newBreakers returns
// fresh breakers, every subscription closed, for one test (a new instance,
// or a shared server with a key prefix per test); tests run in parallel.
// Breakers take the time as an argument, so features are not consulted.
func RunBreakers(t *testing.T, newBreakers func(t *testing.T) ports.Breakers, features Features) {
	t.Helper()
	s := breakerSuite{newBreakers: newBreakers, f: features}
	tests := []struct {
		name string
		fn   func(t *testing.T)
	}{
		{"NeverSeenIsClosed", s.testNeverSeenIsClosed},
		{"FullCycleSuccessCloses", s.testFullCycleSuccessCloses},
		{"ProbeFailureReopens", s.testProbeFailureReopens},
		{"SuccessResetsFailures", s.testSuccessResetsFailures},
		{"OpenIgnoresLateResults", s.testOpenIgnoresLateResults},
		{"LostProbesExpire", s.testLostProbesExpire},
		{"SubscriptionsAreIndependent", s.testSubscriptionsAreIndependent},
		{"ConcurrentFailuresOpenOnce", s.testConcurrentFailuresOpenOnce},
		{"ConcurrentProbes", s.testConcurrentProbes},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t)
		})
	}
}

type breakerSuite struct {
	newBreakers func(t *testing.T) ports.Breakers
	f           Features
}

// allow calls Allow and fails the test on an error.
func allow(t *testing.T, b ports.Breakers, sub string, cfg domain.BreakerConfig, now time.Time) (bool, time.Time) {
	t.Helper()
	ok, retryAt, err := b.Allow(ctxFor(t), sub, cfg, now)
	require.NoError(t, err)
	return ok, retryAt
}

// record calls Record and fails the test on an error.
func record(t *testing.T, b ports.Breakers, sub string, cfg domain.BreakerConfig, success bool, now time.Time) domain.Breaker {
	t.Helper()
	s, err := b.Record(ctxFor(t), sub, cfg, success, now)
	require.NoError(t, err)
	return s
}

// open records cfg.FailureThreshold failures at now and returns the open
// state.
func open(t *testing.T, b ports.Breakers, sub string, cfg domain.BreakerConfig, now time.Time) domain.Breaker {
	t.Helper()
	var s domain.Breaker
	for i := range cfg.FailureThreshold {
		s = record(t, b, sub, cfg, false, now)
		if i < cfg.FailureThreshold-1 {
			require.Equal(t, domain.BreakerClosed, s.Phase, "failure %d of %d keeps the breaker closed", i+1, cfg.FailureThreshold)
			require.Equal(t, i+1, s.Failures)
		}
	}
	require.Equal(t, domain.BreakerOpen, s.Phase, "failure %d opens the breaker", cfg.FailureThreshold)
	require.Equal(t, cfg.FailureThreshold, s.Failures)
	require.True(t, s.OpenUntil.Equal(now.Add(cfg.OpenDuration)), "open until %s, want now+OpenDuration = %s", s.OpenUntil, now.Add(cfg.OpenDuration))
	return s
}

func (s breakerSuite) testNeverSeenIsClosed(t *testing.T) {
	b, cfg := s.newBreakers(t), domain.DefaultBreakerConfig()
	ok, retryAt := allow(t, b, subA, cfg, t0)
	assert.True(t, ok, "a subscription never seen has a closed breaker")
	assert.True(t, retryAt.IsZero())

	st := record(t, b, subB, cfg, true, t0)
	assert.Equal(t, domain.BreakerClosed, st.Phase)
	assert.Zero(t, st.Failures)
}

func (s breakerSuite) testFullCycleSuccessCloses(t *testing.T) {
	b, cfg := s.newBreakers(t), domain.DefaultBreakerConfig()
	opened := open(t, b, subA, cfg, t0)

	ok, retryAt := allow(t, b, subA, cfg, t0.Add(time.Second))
	assert.False(t, ok, "an open breaker denies")
	assert.True(t, retryAt.Equal(opened.OpenUntil), "denied until OpenUntil %s, got %s", opened.OpenUntil, retryAt)
	ok, _ = allow(t, b, subA, cfg, opened.OpenUntil.Add(-time.Nanosecond))
	assert.False(t, ok, "still open a nanosecond before OpenUntil: the adapter must keep OpenUntil exactly")

	probeAt := opened.OpenUntil
	for i := range cfg.HalfOpenProbes {
		ok, _ := allow(t, b, subA, cfg, probeAt)
		assert.True(t, ok, "half-open admits probe %d of %d", i+1, cfg.HalfOpenProbes)
	}
	ok, retryAt = allow(t, b, subA, cfg, probeAt)
	assert.False(t, ok, "half-open admits at most HalfOpenProbes probes")
	assert.True(t, retryAt.Equal(probeAt.Add(cfg.ProbeRetryDelay())), "denied for ProbeRetryDelay, got retryAt %s", retryAt)

	st := record(t, b, subA, cfg, true, probeAt.Add(time.Second))
	assert.Equal(t, domain.BreakerClosed, st.Phase, "a probe's success closes the breaker")
	assert.Zero(t, st.Failures)
	for range 2 * cfg.HalfOpenProbes {
		ok, _ := allow(t, b, subA, cfg, probeAt.Add(2*time.Second))
		assert.True(t, ok, "a closed breaker admits everything")
	}
}

func (s breakerSuite) testProbeFailureReopens(t *testing.T) {
	b, cfg := s.newBreakers(t), domain.DefaultBreakerConfig()
	opened := open(t, b, subA, cfg, t0)
	probeAt := opened.OpenUntil.Add(time.Second)
	ok, _ := allow(t, b, subA, cfg, probeAt)
	require.True(t, ok, "the first probe")

	failedAt := probeAt.Add(2 * time.Second)
	st := record(t, b, subA, cfg, false, failedAt)
	assert.Equal(t, domain.BreakerOpen, st.Phase, "a probe's failure reopens the breaker")
	assert.True(t, st.OpenUntil.Equal(failedAt.Add(cfg.OpenDuration)), "reopened until %s, want %s", st.OpenUntil, failedAt.Add(cfg.OpenDuration))

	ok, retryAt := allow(t, b, subA, cfg, failedAt.Add(time.Second))
	assert.False(t, ok, "reopened: denied")
	assert.True(t, retryAt.Equal(st.OpenUntil))
	ok, _ = allow(t, b, subA, cfg, st.OpenUntil)
	assert.True(t, ok, "probing starts again at the new OpenUntil")
}

func (s breakerSuite) testSuccessResetsFailures(t *testing.T) {
	b, cfg := s.newBreakers(t), domain.DefaultBreakerConfig()
	for round := range 3 {
		for i := range cfg.FailureThreshold - 1 {
			st := record(t, b, subA, cfg, false, t0)
			require.Equal(t, i+1, st.Failures, "round %d: failures count up from a success", round)
		}
		st := record(t, b, subA, cfg, true, t0)
		require.Equal(t, domain.BreakerClosed, st.Phase)
		require.Zero(t, st.Failures, "a success resets the count")
	}
	ok, _ := allow(t, b, subA, cfg, t0)
	assert.True(t, ok, "failures that are not consecutive never open the breaker")
}

func (s breakerSuite) testOpenIgnoresLateResults(t *testing.T) {
	b, cfg := s.newBreakers(t), domain.DefaultBreakerConfig()
	opened := open(t, b, subA, cfg, t0)
	for _, success := range []bool{true, false} {
		st := record(t, b, subA, cfg, success, t0.Add(time.Second))
		assert.Equal(t, domain.BreakerOpen, st.Phase, "a late result (success %v) leaves the breaker open", success)
		assert.True(t, st.OpenUntil.Equal(opened.OpenUntil), "a late result does not move OpenUntil")
	}
}

func (s breakerSuite) testLostProbesExpire(t *testing.T) {
	b, cfg := s.newBreakers(t), domain.DefaultBreakerConfig()
	opened := open(t, b, subA, cfg, t0)
	probeAt := opened.OpenUntil
	for range cfg.HalfOpenProbes {
		ok, _ := allow(t, b, subA, cfg, probeAt)
		require.True(t, ok)
	}
	ok, _ := allow(t, b, subA, cfg, probeAt.Add(cfg.OpenDuration-time.Nanosecond))
	assert.False(t, ok, "the probes have until OpenDuration to answer")
	ok, _ = allow(t, b, subA, cfg, probeAt.Add(cfg.OpenDuration))
	assert.True(t, ok, "probes that never answered are presumed lost and a new window starts")
}

func (s breakerSuite) testSubscriptionsAreIndependent(t *testing.T) {
	b, cfg := s.newBreakers(t), domain.DefaultBreakerConfig()
	open(t, b, subA, cfg, t0)
	ok, _ := allow(t, b, subB, cfg, t0.Add(time.Second))
	assert.True(t, ok, "opening %s's breaker leaves %s's closed", subA, subB)
	st := record(t, b, subB, cfg, false, t0)
	assert.Equal(t, 1, st.Failures, "%s counts its own failures", subB)
	ok, _ = allow(t, b, subA, cfg, t0.Add(time.Second))
	assert.False(t, ok)
}

// testConcurrentFailuresOpenOnce records failures from many goroutines at
// once, each at its own instant. Applied atomically, the closed results
// count 1..FailureThreshold-1 once each, exactly one failure opens the
// breaker, and the rest find it open: every open result carries that one
// OpenUntil. A lost update shows as a repeated count, a double opening as
// two OpenUntils.
func (s breakerSuite) testConcurrentFailuresOpenOnce(t *testing.T) {
	b, cfg := s.newBreakers(t), domain.DefaultBreakerConfig()
	ctx := ctxFor(t)
	const workers = 20
	results := make([]domain.Breaker, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for i := range workers {
		wg.Go(func() {
			results[i], errs[i] = b.Record(ctx, subA, cfg, false, t0.Add(time.Duration(i)*time.Millisecond))
		})
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "worker %d", i)
	}

	var closedCounts []int
	var openUntils []time.Time
	for _, r := range results {
		switch r.Phase {
		case domain.BreakerClosed:
			closedCounts = append(closedCounts, r.Failures)
		case domain.BreakerOpen:
			assert.Equal(t, cfg.FailureThreshold, r.Failures, "the open breaker keeps the count that opened it")
			if !slices.ContainsFunc(openUntils, r.OpenUntil.Equal) {
				openUntils = append(openUntils, r.OpenUntil)
			}
		default:
			t.Errorf("unexpected phase %q after failures", r.Phase)
		}
	}
	slices.Sort(closedCounts)
	want := make([]int, 0, cfg.FailureThreshold-1)
	for i := 1; i < cfg.FailureThreshold; i++ {
		want = append(want, i)
	}
	assert.Equal(t, want, closedCounts, "each failure before the threshold counts exactly once")
	require.Len(t, openUntils, 1, "the breaker opened exactly once; OpenUntils seen: %v", openUntils)
	offset := openUntils[0].Sub(t0.Add(cfg.OpenDuration))
	assert.True(t, offset >= 0 && offset < workers*time.Millisecond && offset%time.Millisecond == 0,
		"OpenUntil %s is one worker's now + OpenDuration", openUntils[0])

	ok, retryAt := allow(t, b, subA, cfg, t0.Add(time.Second))
	assert.False(t, ok)
	assert.True(t, retryAt.Equal(openUntils[0]), "the stored state is the one returned: retryAt %s, want %s", retryAt, openUntils[0])
}

// testConcurrentProbes asks a half-open breaker from many goroutines at
// once: exactly HalfOpenProbes get through.
func (s breakerSuite) testConcurrentProbes(t *testing.T) {
	b, cfg := s.newBreakers(t), domain.DefaultBreakerConfig()
	ctx := ctxFor(t)
	opened := open(t, b, subA, cfg, t0)
	const workers = 20
	var mu sync.Mutex
	allowed, denied := 0, 0
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			ok, retryAt, err := b.Allow(ctx, subA, cfg, opened.OpenUntil)
			if err != nil {
				errs <- err
				return
			}
			if !ok && !retryAt.Equal(opened.OpenUntil.Add(cfg.ProbeRetryDelay())) {
				errs <- fmt.Errorf("a denied probe should retry after ProbeRetryDelay, got retryAt %s", retryAt)
			}
			mu.Lock()
			defer mu.Unlock()
			if ok {
				allowed++
			} else {
				denied++
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	assert.Equal(t, cfg.HalfOpenProbes, allowed, "exactly HalfOpenProbes probes get through")
	assert.Equal(t, workers-cfg.HalfOpenProbes, denied)
}
