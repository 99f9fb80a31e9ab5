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

// protectionClock is a settable clock for one Protection.
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

func TestProtection(t *testing.T) {
	t.Parallel()
	protectiontest.RunProtection(t, func(t *testing.T) ports.Protection {
		return memory.NewProtection(memory.ProtectionOptions{})
	}, protectiontest.Features{RateBurst: memory.RateBurst})
}

func admission(sub, holder string, perSecond int, now time.Time) ports.Admission {
	return ports.Admission{
		SubscriptionID: sub, Holder: holder, Breaker: domain.DefaultBreakerConfig(), Now: now,
		PerSecond: perSecond, MaxInFlight: 1000, Lease: time.Minute,
	}
}

// TestProtectionManySubscriptions admits requests to many subscriptions,
// lets their budgets refill, and checks they still behave as fresh (the
// rate limit forgets full budgets as it goes).
func TestProtectionManySubscriptions(t *testing.T) {
	t.Parallel()
	clock := newProtectionClock()
	p := memory.NewProtection(memory.ProtectionOptions{Now: clock.Now})
	ctx := t.Context()
	for round := range 3 {
		for i := range 3000 {
			sub, holder := fmt.Sprint("s", i), fmt.Sprint("h", round)
			res, err := p.Admit(ctx, admission(sub, holder, 10, clock.Now()))
			require.NoError(t, err)
			require.Equal(t, ports.RefusedByNone, res.Refused, "round %d: subscription %d has a full budget", round, i)
			_, err = p.Finish(ctx, sub, holder, domain.DefaultBreakerConfig(), true, clock.Now())
			require.NoError(t, err)
		}
		clock.Advance(time.Second)
	}
}

// TestProtectionRateLimitRefillsByItsClock: the budget refills as the
// clock given moves, exactly one request per interval.
func TestProtectionRateLimitRefillsByItsClock(t *testing.T) {
	t.Parallel()
	clock := newProtectionClock()
	p := memory.NewProtection(memory.ProtectionOptions{Now: clock.Now})
	ctx := t.Context()
	res, err := p.Admit(ctx, admission("s", "a", 10, clock.Now()))
	require.NoError(t, err)
	require.Equal(t, ports.RefusedByNone, res.Refused)
	res, err = p.Admit(ctx, admission("s", "b", 10, clock.Now()))
	require.NoError(t, err)
	require.Equal(t, ports.RefusedByRateLimit, res.Refused, "a burst of 1 at 10/s")
	assert.Equal(t, 100*time.Millisecond, res.RetryAfter)
	clock.Advance(res.RetryAfter)
	res, err = p.Admit(ctx, admission("s", "b", 10, clock.Now()))
	require.NoError(t, err)
	assert.Equal(t, ports.RefusedByNone, res.Refused, "one request an interval later")
}

// TestProtectionKeepsOpenUntilInUTC checks that the memory adapter hands
// back OpenUntil the way the Redis adapter round-trips it.
func TestProtectionKeepsOpenUntilInUTC(t *testing.T) {
	t.Parallel()
	p := memory.NewProtection(memory.ProtectionOptions{})
	cfg := domain.DefaultBreakerConfig()
	now := time.Now().In(time.FixedZone("X", 3600))
	var s domain.Breaker
	for i := range cfg.FailureThreshold {
		var err error
		_, err = p.Admit(t.Context(), admission("s", fmt.Sprint("h", i), domain.MaxRateLimit, now))
		require.NoError(t, err)
		s, err = p.Finish(t.Context(), "s", fmt.Sprint("h", i), cfg, false, now)
		require.NoError(t, err)
	}
	require.Equal(t, domain.BreakerOpen, s.Phase)
	assert.True(t, s.OpenUntil.Equal(now.Add(cfg.OpenDuration)))
	assert.Equal(t, time.UTC, s.OpenUntil.Location())
}
