package redis

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatch-webhooks/dispatch/adapters/memory"
	"github.com/dispatch-webhooks/dispatch/adapters/redis/redistest"
	"github.com/dispatch-webhooks/dispatch/ports"
	"github.com/dispatch-webhooks/dispatch/ports/protectiontest"
)

// fallbackEvents records the hooks' calls.
type fallbackEvents struct {
	mu        sync.Mutex
	fallbacks []error
	recovers  int
}

func (e *fallbackEvents) options(clock *fakeClock) FallbackOptions {
	return FallbackOptions{
		RetryInterval: 5 * time.Second,
		Now:           clock.Now,
		OnFallback: func(err error) {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.fallbacks = append(e.fallbacks, err)
		},
		OnRecover: func() {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.recovers++
		},
	}
}

func (e *fallbackEvents) counts() (fallbacks, recovers int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.fallbacks), e.recovers
}

// TestFallbackSemaphore runs the contract suite on a FallbackSemaphore whose
// primary answers: it must behave like the semaphore it wraps.
func TestFallbackSemaphore(t *testing.T) {
	protectiontest.RunSemaphore(t, func(t *testing.T) ports.Semaphore {
		primary := NewSemaphore(redistest.Client(t), redistest.Prefix(t))
		return NewFallbackSemaphore(primary, memory.NewSemaphore(memory.SemaphoreOptions{}), FallbackOptions{})
	}, protectiontest.Features{})
}

// TestFallbackSemaphoreRedisDown closes miniredis under a FallbackSemaphore:
// it switches to the local semaphore once (one OnFallback), still enforces
// the limit there, releases each holder where it acquired, stays local for
// RetryInterval and, once Redis is back, returns to it (one OnRecover).
func TestFallbackSemaphoreRedisDown(t *testing.T) {
	t.Parallel()
	mr, _ := redistest.Mini(t)
	// Without go-redis's retries (3 per command, 5 per dial, with backoff)
	// a refused connection fails at once, which keeps the test fast;
	// production clients retry, within PrimaryTimeout.
	client := goredis.NewClient(&goredis.Options{Addr: mr.Addr(), MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = client.Close() })
	clock := &fakeClock{now: time.Now()}
	local := memory.NewSemaphore(memory.SemaphoreOptions{Now: clock.Now})
	var events fallbackEvents
	s := NewFallbackSemaphore(NewSemaphore(client, ""), local, events.options(clock))
	ctx := t.Context()
	const limit, lease = 3, time.Minute
	key := DefaultPrefix + "{sub:s}:inflight"

	require.True(t, acquireOK(t, s, "s", "on-redis", limit, lease))
	assert.True(t, mr.Exists(key), "the primary holds the slot")
	assert.False(t, s.UsingFallback())

	mr.Close()
	var won []string
	for i := range 2 * limit {
		holder := fmt.Sprint("local-", i)
		if acquireOK(t, s, "s", holder, limit, lease) {
			won = append(won, holder)
		}
	}
	assert.Len(t, won, limit, "with Redis down the limit is enforced locally")
	assert.True(t, s.UsingFallback())
	fallbacks, recovers := events.counts()
	assert.Equal(t, 1, fallbacks, "OnFallback is called once per switch")
	assert.Zero(t, recovers)
	events.mu.Lock()
	assert.Error(t, events.fallbacks[0], "OnFallback gets the primary's error")
	events.mu.Unlock()

	// Released locally: the local slot frees without Redis.
	require.NoError(t, s.Release(ctx, "s", won[0]))
	assert.True(t, acquireOK(t, s, "s", "local-again", limit, lease), "a local release frees a local slot")
	// The holder from before the outage goes back to Redis, which is down.
	assert.Error(t, s.Release(ctx, "s", "on-redis"), "a Redis holder is released on Redis")

	require.NoError(t, mr.Restart())
	clock.Advance(4 * time.Second)
	assert.False(t, acquireOK(t, s, "s", "still-local", limit, lease), "before RetryInterval the local semaphore, still full, answers")
	assert.True(t, s.UsingFallback())

	clock.Advance(time.Second)
	assert.True(t, acquireOK(t, s, "s", "back", limit, lease), "after RetryInterval Redis answers again")
	assert.False(t, s.UsingFallback())
	fallbacks, recovers = events.counts()
	assert.Equal(t, 1, fallbacks)
	assert.Equal(t, 1, recovers, "OnRecover is called once per switch back")
	members, err := mr.ZMembers(key)
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"on-redis", "back"}, members, "the new slot is on Redis (on-redis's release was lost in the outage; its lease will end)")

	// Local holders are still released locally after the switch back.
	for _, h := range won[1:] {
		require.NoError(t, s.Release(ctx, "s", h))
	}
	require.NoError(t, s.Release(ctx, "s", "local-again"))
	ok, err := local.TryAcquire(ctx, "s", "probe", 1, lease)
	require.NoError(t, err)
	assert.True(t, ok, "every local slot was given back to the local semaphore")
	require.NoError(t, s.Release(ctx, "s", "back"))
	members, err = mr.ZMembers(key)
	require.NoError(t, err)
	assert.Equal(t, []string{"on-redis"}, members, "a Redis holder is released on Redis")
}

// TestFallbackSemaphoreRetryFailsStaysLocal checks that a failed retry keeps
// the semaphore local for another RetryInterval without a second
// OnFallback.
func TestFallbackSemaphoreRetryFailsStaysLocal(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{now: time.Now()}
	primary := &flakySemaphore{err: errors.New("connection refused")}
	var events fallbackEvents
	s := NewFallbackSemaphore(primary, memory.NewSemaphore(memory.SemaphoreOptions{Now: clock.Now}), events.options(clock))

	require.True(t, acquireOK(t, s, "s", "a", 5, time.Minute))
	require.True(t, acquireOK(t, s, "s", "b", 5, time.Minute))
	assert.Equal(t, 1, primary.callCount(), "while local, the primary is not asked")
	clock.Advance(5 * time.Second)
	require.True(t, acquireOK(t, s, "s", "c", 5, time.Minute))
	assert.Equal(t, 2, primary.callCount(), "after RetryInterval the primary is tried again")
	clock.Advance(4 * time.Second)
	require.True(t, acquireOK(t, s, "s", "d", 5, time.Minute))
	assert.Equal(t, 2, primary.callCount(), "a failed retry starts another RetryInterval")
	fallbacks, recovers := events.counts()
	assert.Equal(t, 1, fallbacks, "staying local is not a new switch")
	assert.Zero(t, recovers)
}

// TestFallbackSemaphoreCallerErrors checks that errors that say nothing
// about Redis do not switch: the caller's cancelled context and bad
// arguments.
func TestFallbackSemaphoreCallerErrors(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{now: time.Now()}
	primary := &flakySemaphore{err: context.Canceled}
	var events fallbackEvents
	s := NewFallbackSemaphore(primary, memory.NewSemaphore(memory.SemaphoreOptions{Now: clock.Now}), events.options(clock))

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := s.TryAcquire(ctx, "s", "a", 1, time.Minute)
	assert.ErrorIs(t, err, context.Canceled)
	_, err = s.TryAcquire(t.Context(), "s", "", 1, time.Minute)
	assert.Error(t, err)
	_, err = s.TryAcquire(t.Context(), "s", "a", 0, time.Minute)
	assert.Error(t, err)
	assert.False(t, s.UsingFallback())
	fallbacks, _ := events.counts()
	assert.Zero(t, fallbacks)
	assert.Equal(t, 1, primary.callCount(), "bad arguments never reach the primary")
}

// TestFallbackSemaphorePrimaryTimeout checks that a primary that does not
// answer within PrimaryTimeout counts as down, while the caller's own
// deadline is still far.
func TestFallbackSemaphorePrimaryTimeout(t *testing.T) {
	t.Parallel()
	primary := &flakySemaphore{hang: true}
	var events fallbackEvents
	opts := events.options(&fakeClock{now: time.Now()})
	opts.PrimaryTimeout = 10 * time.Millisecond
	s := NewFallbackSemaphore(primary, memory.NewSemaphore(memory.SemaphoreOptions{}), opts)
	assert.True(t, acquireOK(t, s, "s", "a", 1, time.Minute))
	assert.True(t, s.UsingFallback())
	events.mu.Lock()
	defer events.mu.Unlock()
	require.Len(t, events.fallbacks, 1)
	assert.ErrorIs(t, events.fallbacks[0], context.DeadlineExceeded)
}

// TestFallbackSemaphoreOneProbeAtATime checks that while the primary is
// retried, which may take up to PrimaryTimeout, the other callers keep
// using the local semaphore instead of all waiting on a dead Redis.
func TestFallbackSemaphoreOneProbeAtATime(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{now: time.Now()}
	primary := &flakySemaphore{hang: true}
	var events fallbackEvents
	opts := events.options(clock)
	opts.PrimaryTimeout = 50 * time.Millisecond
	s := NewFallbackSemaphore(primary, memory.NewSemaphore(memory.SemaphoreOptions{Now: clock.Now}), opts)
	require.True(t, acquireOK(t, s, "s", "first", 100, time.Minute))
	require.Equal(t, 1, primary.callCount())

	clock.Advance(opts.RetryInterval)
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Go(func() { assert.True(t, acquireOK(t, s, "s", fmt.Sprint(i), 100, time.Minute)) })
	}
	wg.Wait()
	assert.Equal(t, 2, primary.callCount(), "one caller retried the primary, the rest stayed local")
	fallbacks, _ := events.counts()
	assert.Equal(t, 1, fallbacks)
}

// TestFallbackSemaphoreForgetsAbandonedHolders checks that holders never
// released are forgotten once their lease is long over, so the map stays
// bounded.
func TestFallbackSemaphoreForgetsAbandonedHolders(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{now: time.Now()}
	s := NewFallbackSemaphore(&flakySemaphore{}, memory.NewSemaphore(memory.SemaphoreOptions{Now: clock.Now}), FallbackOptions{Now: clock.Now})
	for i := range fallbackMinSweep - 1 {
		require.True(t, acquireOK(t, s, "s", fmt.Sprint(i), fallbackMinSweep, time.Second))
	}
	clock.Advance(time.Second + fallbackForgetAfter + time.Nanosecond)
	require.True(t, acquireOK(t, s, "s", "last", 1, time.Second))
	s.mu.Lock()
	defer s.mu.Unlock()
	assert.Len(t, s.holders, 1, "only the live holder is remembered")
}

// flakySemaphore is a primary that fails with err, hangs until its context
// ends, or (neither set) always grants.
type flakySemaphore struct {
	err  error
	hang bool

	mu    sync.Mutex
	calls int
}

func (f *flakySemaphore) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

func (f *flakySemaphore) TryAcquire(ctx context.Context, _, _ string, _ int, _ time.Duration) (bool, error) {
	f.mu.Lock()
	f.calls++
	f.mu.Unlock()
	if f.hang {
		<-ctx.Done()
		return false, ctx.Err()
	}
	return f.err == nil, f.err
}

func (f *flakySemaphore) Release(context.Context, string, string) error { return f.err }
