package memory_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatch-webhooks/dispatch/adapters/memory"
	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
	"github.com/dispatch-webhooks/dispatch/ports/protectiontest"
)

// protectionClock is a settable clock for one rate limiter or semaphore.
type protectionClock struct {
	mu  sync.Mutex
	now time.Time
}

func newProtectionClock() *protectionClock {
	return &protectionClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *protectionClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *protectionClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

type clockedRateLimiter struct {
	*memory.RateLimiter
	clock *protectionClock
}

type clockedSemaphore struct {
	*memory.Semaphore
	clock *protectionClock
}

func TestBreakers(t *testing.T) {
	t.Parallel()
	protectiontest.RunBreakers(t, func(t *testing.T) ports.Breakers { return memory.NewBreakers() }, protectiontest.Features{})
}

func TestRateLimiter(t *testing.T) {
	t.Parallel()
	protectiontest.RunRateLimiter(t, func(t *testing.T) ports.RateLimiter {
		clock := newProtectionClock()
		return clockedRateLimiter{RateLimiter: memory.NewRateLimiter(memory.RateLimiterOptions{Now: clock.Now}), clock: clock}
	}, protectiontest.Features{
		RateBurst:          memory.RateBurst,
		AdvanceRateLimiter: func(t *testing.T, l ports.RateLimiter, d time.Duration) { l.(clockedRateLimiter).clock.Advance(d) },
	})
}

// TestRateLimiterRealClock runs the suite on the wall clock, as `dispatch
// dev` uses the limiter, so the real-time paths of the suite stay
// exercised too.
func TestRateLimiterRealClock(t *testing.T) {
	t.Parallel()
	protectiontest.RunRateLimiter(t, func(t *testing.T) ports.RateLimiter {
		return memory.NewRateLimiter(memory.RateLimiterOptions{})
	}, protectiontest.Features{RateBurst: memory.RateBurst})
}

func TestSemaphore(t *testing.T) {
	t.Parallel()
	protectiontest.RunSemaphore(t, func(t *testing.T) ports.Semaphore {
		clock := newProtectionClock()
		return clockedSemaphore{Semaphore: memory.NewSemaphore(memory.SemaphoreOptions{Now: clock.Now}), clock: clock}
	}, protectiontest.Features{
		AdvanceSemaphore: func(t *testing.T, s ports.Semaphore, d time.Duration) { s.(clockedSemaphore).clock.Advance(d) },
	})
}

// TestSemaphoreRealClock runs the suite on the wall clock.
func TestSemaphoreRealClock(t *testing.T) {
	t.Parallel()
	protectiontest.RunSemaphore(t, func(t *testing.T) ports.Semaphore {
		return memory.NewSemaphore(memory.SemaphoreOptions{})
	}, protectiontest.Features{})
}

// TestSemaphoreRenew checks the Redis adapter's renewal semantics: a holder
// acquiring again renews its lease and keeps its slot when all are taken.
func TestSemaphoreRenew(t *testing.T) {
	t.Parallel()
	clock := newProtectionClock()
	s := memory.NewSemaphore(memory.SemaphoreOptions{Now: clock.Now})
	ctx := t.Context()
	acquire := func(holder string) bool {
		ok, err := s.TryAcquire(ctx, "s", holder, 2, time.Second)
		require.NoError(t, err)
		return ok
	}
	require.True(t, acquire("a"))
	require.True(t, acquire("b"))
	clock.Advance(900 * time.Millisecond)
	assert.True(t, acquire("a"), "a holder renews its lease even when all slots are taken")
	clock.Advance(200 * time.Millisecond)
	assert.True(t, acquire("c"), "b's lease ran out")
	assert.False(t, acquire("d"), "a's renewed lease still counts")
}

func TestSemaphoreInvalidArguments(t *testing.T) {
	t.Parallel()
	s := memory.NewSemaphore(memory.SemaphoreOptions{})
	for _, tc := range []struct {
		holder string
		limit  int
		ttl    time.Duration
	}{{"", 1, time.Second}, {"h", 0, time.Second}, {"h", 1, 0}} {
		_, err := s.TryAcquire(t.Context(), "s", tc.holder, tc.limit, tc.ttl)
		assert.Error(t, err, "holder %q limit %d ttl %s", tc.holder, tc.limit, tc.ttl)
	}
}

func TestRateLimiterInvalidRate(t *testing.T) {
	t.Parallel()
	_, _, err := memory.NewRateLimiter(memory.RateLimiterOptions{}).Take(t.Context(), "s", 0)
	assert.ErrorContains(t, err, "at least 1")
}

// TestRateLimiterManySubscriptions takes from many subscriptions, lets
// their budgets refill, and checks they still behave as fresh (the limiter
// forgets full budgets as it goes).
func TestRateLimiterManySubscriptions(t *testing.T) {
	t.Parallel()
	clock := newProtectionClock()
	l := memory.NewRateLimiter(memory.RateLimiterOptions{Now: clock.Now})
	ctx := t.Context()
	for round := range 3 {
		for i := range 3000 {
			ok, _, err := l.Take(ctx, fmt.Sprint("s", i), 10)
			require.NoError(t, err)
			require.True(t, ok, "round %d: subscription %d has a full budget", round, i)
		}
		clock.Advance(time.Second)
	}
}

// TestBreakersKeepsOpenUntilInUTC checks that the memory adapter hands back
// OpenUntil the way the Redis adapter round-trips it.
func TestBreakersKeepsOpenUntilInUTC(t *testing.T) {
	t.Parallel()
	b := memory.NewBreakers()
	cfg := domain.DefaultBreakerConfig()
	now := time.Now().In(time.FixedZone("X", 3600))
	var s domain.Breaker
	for range cfg.FailureThreshold {
		var err error
		s, err = b.Record(t.Context(), "s", cfg, false, now)
		require.NoError(t, err)
	}
	require.Equal(t, domain.BreakerOpen, s.Phase)
	assert.True(t, s.OpenUntil.Equal(now.Add(cfg.OpenDuration)))
	assert.Equal(t, time.UTC, s.OpenUntil.Location())
}

func TestProtection(t *testing.T) {
	t.Parallel()
	protectiontest.RunProtection(t, func(t *testing.T) protectiontest.ProtectionSet {
		b := memory.NewBreakers()
		l := memory.NewRateLimiter(memory.RateLimiterOptions{})
		s := memory.NewSemaphore(memory.SemaphoreOptions{})
		return protectiontest.ProtectionSet{Protection: memory.NewProtection(b, l, s), Breakers: b, Limiter: l, Semaphore: s}
	}, protectiontest.Features{RateBurst: memory.RateBurst})
}
