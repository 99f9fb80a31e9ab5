package protectiontest

import (
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatch-webhooks/dispatch/ports"
)

// RunRateLimiter runs the contract suite of ports.RateLimiter. newLimiter
// returns a fresh limiter, every subscription with its full budget, for
// one test (a new instance, or a shared server with a key prefix per
// test); tests run in parallel. features.RateBurst is required.
func RunRateLimiter(t *testing.T, newLimiter func(t *testing.T) ports.RateLimiter, features Features) {
	t.Helper()
	require.NotNil(t, features.RateBurst, "protectiontest: Features.RateBurst is required to test a rate limiter")
	s := rateSuite{newLimiter: newLimiter, f: features}
	tests := []struct {
		name string
		fn   func(t *testing.T)
	}{
		{"Burst", s.testBurst},
		{"ConcurrentBurst", s.testConcurrentBurst},
		{"RetryAfter", s.testRetryAfter},
		{"SustainedRate", s.testSustainedRate},
		{"SubscriptionsAreIndependent", s.testSubscriptionsAreIndependent},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t)
		})
	}
}

type rateSuite struct {
	newLimiter func(t *testing.T) ports.RateLimiter
	f          Features
}

// take calls Take and fails the test on an error; a denial must say when to
// come back.
func take(t *testing.T, l ports.RateLimiter, sub string, perSecond int) (bool, time.Duration) {
	t.Helper()
	ok, retryAfter, err := l.Take(ctxFor(t), sub, perSecond)
	require.NoError(t, err)
	if !ok {
		require.Positive(t, retryAfter, "a denial says when a request will next be allowed")
	}
	return ok, retryAfter
}

// spend takes requests until one is denied, and returns when that request
// started and its retryAfter. In real time the budget refills meanwhile, so
// it may take a few more than the burst.
func spend(t *testing.T, l ports.RateLimiter, sub string, perSecond int) (time.Time, time.Duration) {
	t.Helper()
	for range 1000 {
		before := time.Now()
		if ok, retryAfter := take(t, l, sub, perSecond); !ok {
			return before, retryAfter
		}
	}
	t.Fatalf("1000 requests in a row at %d/s were all allowed", perSecond)
	return time.Time{}, 0
}

// realBound is the most a limiter may allow within elapsed of real time,
// starting with a full budget: the burst, one more per 1/perSecond, and one
// for the window's edges.
func realBound(perSecond, burst int, elapsed time.Duration) int {
	return burst + int(math.Ceil(elapsed.Seconds()*float64(perSecond))) + 1
}

// testBurst takes 100 requests (or 1.5 bursts, if more) in a row from a
// full budget. With a still clock exactly the burst gets through; in real
// time at most the burst plus what refilled meanwhile, and never more than
// perSecond+burst in a second.
func (s rateSuite) testBurst(t *testing.T) {
	for _, perSecond := range []int{1, 20, 1000} {
		t.Run(fmt.Sprintf("%d/s", perSecond), func(t *testing.T) {
			l := s.newLimiter(t)
			burst := s.f.RateBurst(perSecond)
			calls := max(100, burst*3/2)
			start := time.Now()
			allowed := 0
			for range calls {
				if ok, _ := take(t, l, subA, perSecond); ok {
					allowed++
				}
			}
			elapsed := time.Since(start)
			if s.f.AdvanceRateLimiter != nil {
				assert.Equal(t, burst, allowed, "%d requests at once at %d/s: exactly the burst gets through", calls, perSecond)
				return
			}
			assert.GreaterOrEqual(t, allowed, burst, "a full budget lets the burst through")
			assert.LessOrEqual(t, allowed, realBound(perSecond, burst, elapsed), "%d requests in %s at %d/s (burst %d)", calls, elapsed, perSecond, burst)
			if elapsed < time.Second {
				assert.LessOrEqual(t, allowed, perSecond+burst, "within a second at most perSecond + burst")
			}
		})
	}
}

// testConcurrentBurst takes 100 requests from 50 goroutines at once: the
// budget is shared exactly.
func (s rateSuite) testConcurrentBurst(t *testing.T) {
	l, ctx := s.newLimiter(t), ctxFor(t)
	const perSecond, workers, each = 20, 50, 2
	burst := s.f.RateBurst(perSecond)
	var allowed, denied int
	var mu sync.Mutex
	errs := make(chan error, workers)
	start := time.Now()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range each {
				ok, retryAfter, err := l.Take(ctx, subA, perSecond)
				if err != nil {
					errs <- err
					return
				}
				if !ok && retryAfter <= 0 {
					errs <- fmt.Errorf("a denial says when to come back, got retryAfter %s", retryAfter)
				}
				mu.Lock()
				if ok {
					allowed++
				} else {
					denied++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	require.Equal(t, workers*each, allowed+denied)
	if s.f.AdvanceRateLimiter != nil {
		assert.Equal(t, burst, allowed, "concurrent requests share one budget exactly")
		return
	}
	assert.GreaterOrEqual(t, allowed, burst)
	assert.LessOrEqual(t, allowed, min(perSecond+burst, realBound(perSecond, burst, elapsed)),
		"%d concurrent requests in %s at %d/s (burst %d)", workers*each, elapsed, perSecond, burst)
}

// testRetryAfter checks that a denied request is allowed after retryAfter
// and not much before: retryAfter is at most one request's interval once
// the burst is spent.
func (s rateSuite) testRetryAfter(t *testing.T) {
	l := s.newLimiter(t)
	const perSecond = 20
	interval := time.Second / perSecond
	before, retryAfter := spend(t, l, subA, perSecond)
	assert.LessOrEqual(t, retryAfter, interval+time.Millisecond, "with the burst spent, the next request is one interval away")

	if s.f.AdvanceRateLimiter != nil {
		if retryAfter > time.Millisecond {
			s.f.AdvanceRateLimiter(t, l, retryAfter-time.Millisecond)
			ok, _ := take(t, l, subA, perSecond)
			assert.False(t, ok, "a millisecond before retryAfter the request is still denied")
		}
		s.f.AdvanceRateLimiter(t, l, 2*time.Millisecond)
		ok, _ := take(t, l, subA, perSecond)
		assert.True(t, ok, "after retryAfter the request is allowed")
		ok, _ = take(t, l, subA, perSecond)
		assert.False(t, ok, "and only that one")
		return
	}

	deadline := time.Now().Add(waitFor)
	for {
		ok, next := take(t, l, subA, perSecond)
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for a request to be allowed again after retryAfter %s", waitFor, retryAfter)
		}
		time.Sleep(min(next, pollEvery(interval)))
	}
	// The denial was at or after before, so the budget cannot have refilled
	// before before+retryAfter (less the limiter's rounding).
	assert.GreaterOrEqual(t, time.Since(before), retryAfter-time.Millisecond, "allowed again before retryAfter")
}

// testSustainedRate takes requests continuously for a second: the burst,
// then perSecond more, at most perSecond + burst in the second. With a
// still clock it steps the clock 10 ms at a time; in real time it runs for
// a shorter while and checks the bound.
func (s rateSuite) testSustainedRate(t *testing.T) {
	l := s.newLimiter(t)
	const perSecond = 20
	burst := s.f.RateBurst(perSecond)
	if s.f.AdvanceRateLimiter != nil {
		allowed := 0
		for step := 0; ; step++ {
			for range 2 {
				if ok, _ := take(t, l, subA, perSecond); ok {
					allowed++
				}
			}
			if step == 100 { // 100 steps of 10 ms: the closed second [0, 1s]
				break
			}
			s.f.AdvanceRateLimiter(t, l, 10*time.Millisecond)
		}
		assert.LessOrEqual(t, allowed, perSecond+burst, "a second holds at most perSecond + burst requests")
		// At exactly 1 s the last request is due; rounding in the
		// adapter may put it a step later.
		assert.GreaterOrEqual(t, allowed, perSecond+burst-1, "requests spaced out at the rate all get through")
		return
	}
	const fast = 200 // a fast rate keeps the real-time test short
	burst = s.f.RateBurst(fast)
	start := time.Now()
	allowed := 0
	for time.Since(start) < 300*time.Millisecond {
		ok, retryAfter := take(t, l, subA, fast)
		if ok {
			allowed++
			continue
		}
		time.Sleep(min(retryAfter, pollEvery(time.Second/fast)))
	}
	elapsed := time.Since(start)
	assert.LessOrEqual(t, allowed, realBound(fast, burst, elapsed), "%d allowed in %s at %d/s (burst %d)", allowed, elapsed, fast, burst)
	assert.GreaterOrEqual(t, allowed, burst+int(elapsed.Seconds()*fast)/2, "requests spaced out at the rate get through")
}

func (s rateSuite) testSubscriptionsAreIndependent(t *testing.T) {
	l := s.newLimiter(t)
	const perSecond = 20
	burst := s.f.RateBurst(perSecond)
	spend(t, l, subA, perSecond)
	for i := range burst {
		ok, _ := take(t, l, subB, perSecond)
		assert.True(t, ok, "%s has its own budget (request %d)", subB, i+1)
	}
}
