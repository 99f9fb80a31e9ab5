package redis

import (
	"context"
	"slices"

	"strings"
	"sync"

	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatch-webhooks/dispatch/adapters/redis/redistest"
	"github.com/dispatch-webhooks/dispatch/domain"
)

// miniClock is one miniredis's clock, stopped: TIME (which the admit
// script reads) and, with ClockTTL, key expiry stand still.
type miniClock struct {
	mr  *miniredis.Miniredis
	now time.Time
}

// newMiniClock starts a miniredis for the test with its clock stopped at a
// whole millisecond (the scripts count milliseconds and microseconds).
func newMiniClock(t *testing.T) (*miniClock, goredis.UniversalClient) {
	t.Helper()
	mr, client := redistest.Mini(t)
	c := &miniClock{mr: mr, now: time.Now().Truncate(time.Millisecond)}
	mr.SetTime(c.now)
	mr.ClockTTL(true)
	return c, client
}

// fakeClock is a settable clock for Protection's rest after a failure.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// commandCounter counts the commands a client sends, pipelines included,
// to check what a call costs.
type commandCounter struct {
	mu   sync.Mutex
	cmds []string
	// blocked, when set, is told of each blocking XREADGROUP as it goes.
	blocked chan struct{}
}

func (c *commandCounter) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (c *commandCounter) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		c.add(cmd)
		return next(ctx, cmd)
	}
}

func (c *commandCounter) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		for _, cmd := range cmds {
			c.add(cmd)
		}
		return next(ctx, cmds)
	}
}

func (c *commandCounter) add(cmd goredis.Cmder) {
	switch strings.ToUpper(cmd.Name()) {
	case "HELLO", "CLIENT", "AUTH", "SELECT":
		return // a new connection's handshake, not the call's cost
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cmds = append(c.cmds, strings.ToUpper(cmd.Name()))
	if c.blocked != nil && strings.EqualFold(cmd.Name(), "XREADGROUP") && slices.ContainsFunc(cmd.Args(), func(a any) bool {
		s, ok := a.(string)
		return ok && strings.EqualFold(s, "BLOCK")
	}) {
		c.blocked <- struct{}{}
	}
}

func (c *commandCounter) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.cmds
	c.cmds = nil
	return out
}

// countingClient is a client of its own (hooks are per client) on the
// real Redis.
func countingClient(t *testing.T) (goredis.UniversalClient, *commandCounter) {
	t.Helper()
	opts, err := goredis.ParseURL(redistest.URL())
	require.NoError(t, err)
	client := goredis.NewClient(opts)
	t.Cleanup(func() { _ = client.Close() })
	counter := &commandCounter{}
	client.AddHook(counter)
	return client, counter
}

func TestBreakerEncoding(t *testing.T) {
	t.Parallel()
	until := time.Date(2026, 5, 6, 7, 8, 9, 987654321, time.UTC)
	for _, s := range []domain.Breaker{
		{Phase: domain.BreakerClosed, Failures: 3},
		{Phase: domain.BreakerOpen, Failures: 5, OpenUntil: until},
		{Phase: domain.BreakerHalfOpen, Failures: 5, OpenUntil: until, ProbesStarted: 2},
	} {
		enc := encodeBreaker(s)
		got := decodeBreaker(enc)
		assert.Equal(t, s, got, "round trip of %q", enc)
	}
	assert.Empty(t, encodeBreaker(domain.Breaker{}))
	assert.Empty(t, encodeBreaker(domain.Breaker{Phase: domain.BreakerClosed}))
	assert.Equal(t, domain.Breaker{}, decodeBreaker(""))
}

func TestRateBurst(t *testing.T) {
	t.Parallel()
	for perSecond, want := range map[int]int{1: 1, 9: 1, 10: 1, 20: 2, 100: 10, 10000: 1000} {
		assert.Equal(t, want, RateBurst(perSecond), "RateBurst(%d)", perSecond)
	}
}
