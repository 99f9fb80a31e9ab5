package redis

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatch-webhooks/dispatch/adapters/redis/redistest"
	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
	"github.com/dispatch-webhooks/dispatch/ports/protectiontest"
)

// miniClock drives one miniredis's clock: TIME (which the rate limit and
// semaphore scripts read) and, with ClockTTL, key expiry, so both move
// together and only when a test moves them.
type miniClock struct {
	mr *miniredis.Miniredis

	mu  sync.Mutex
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

func (c *miniClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	c.mr.SetTime(c.now)
}

// fakeClock is a settable clock for FallbackSemaphore and the memory
// semaphore.
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

// --- Breakers -------------------------------------------------------------

func TestBreakers(t *testing.T) {
	protectiontest.RunBreakers(t, func(t *testing.T) ports.Breakers {
		return NewBreakers(redistest.Client(t), redistest.Prefix(t))
	}, protectiontest.Features{})
}

// TestBreakersMiniredis runs the suite on miniredis, whose Lua runs the
// compare-and-set script.
func TestBreakersMiniredis(t *testing.T) {
	protectiontest.RunBreakers(t, func(t *testing.T) ports.Breakers {
		_, client := redistest.Mini(t)
		return NewBreakers(client, "")
	}, protectiontest.Features{})
}

// TestBreakersHotPathIsOneGet checks what each kind of call costs: a call
// that changes nothing is one GET; a change is a GET, then one
// compare-and-set script.
func TestBreakersHotPathIsOneGet(t *testing.T) {
	t.Parallel()
	client, counter := countingClient(t)
	b := NewBreakers(client, redistest.Prefix(t))
	ctx, cfg, now := t.Context(), domain.DefaultBreakerConfig(), time.Now()
	require.NoError(t, breakerSwap.Load(ctx, client).Err())
	counter.take()

	ok, _, err := b.Allow(ctx, "s", cfg, now)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, []string{"GET"}, counter.take(), "closed breaker, Allow")
	_, err = b.Record(ctx, "s", cfg, true, now)
	require.NoError(t, err)
	assert.Equal(t, []string{"GET"}, counter.take(), "closed breaker with no failures, success")

	_, err = b.Record(ctx, "s", cfg, false, now)
	require.NoError(t, err)
	assert.Equal(t, []string{"GET", "EVALSHA"}, counter.take(), "a failure changes the state")
	ok, _, err = b.Allow(ctx, "s", cfg, now)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, []string{"GET"}, counter.take(), "closed breaker with failures, Allow")
	_, err = b.Record(ctx, "s", cfg, true, now)
	require.NoError(t, err)
	assert.Equal(t, []string{"GET", "EVALSHA"}, counter.take(), "a success after failures deletes the key")
}

// TestBreakersKey checks the key layout, that a closed breaker with no
// failures leaves no key, and that a stored breaker expires.
func TestBreakersKey(t *testing.T) {
	t.Parallel()
	client := redistest.Client(t)
	prefix := redistest.Prefix(t)
	b := NewBreakers(client, prefix)
	ctx, cfg, now := t.Context(), domain.DefaultBreakerConfig(), time.Now()
	key := prefix + "{sub:s1}:breaker"
	require.Equal(t, key, b.key("s1"))

	_, _, err := b.Allow(ctx, "s1", cfg, now)
	require.NoError(t, err)
	n, err := client.Exists(ctx, key).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "a closed breaker with no failures is no key")

	for range cfg.FailureThreshold {
		_, err = b.Record(ctx, "s1", cfg, false, now)
		require.NoError(t, err)
	}
	v, err := client.Get(ctx, key).Result()
	require.NoError(t, err)
	assert.Equal(t, "o:5:"+strconv.FormatInt(now.Add(cfg.OpenDuration).UnixNano(), 10)+":0", v)
	ttl, err := client.PTTL(ctx, key).Result()
	require.NoError(t, err)
	assert.InDelta(t, (BreakerStateTTL + cfg.OpenDuration).Seconds(), ttl.Seconds(), 5, "an open breaker's key lasts its open period and BreakerStateTTL more")

	_, err = b.Record(ctx, "s1", cfg, true, now.Add(time.Hour))
	require.NoError(t, err) // ignored while open
	ok, _, err := b.Allow(ctx, "s1", cfg, now.Add(time.Hour))
	require.NoError(t, err)
	require.True(t, ok, "probe")
	_, err = b.Record(ctx, "s1", cfg, true, now.Add(time.Hour))
	require.NoError(t, err)
	n, err = client.Exists(ctx, key).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "closing deletes the key")
}

// TestBreakersCorruptValueReadsClosed checks that a value the adapter cannot
// parse reads as a closed breaker and is replaced by the next change.
func TestBreakersCorruptValueReadsClosed(t *testing.T) {
	t.Parallel()
	mr, client := redistest.Mini(t)
	b := NewBreakers(client, "")
	ctx, cfg, now := t.Context(), domain.DefaultBreakerConfig(), time.Now()
	for _, garbage := range []string{"x", "o:1:2", "o:a:b:c", "z:0:0:0"} {
		require.NoError(t, mr.Set(b.key("s"), garbage))
		ok, _, err := b.Allow(ctx, "s", cfg, now)
		require.NoError(t, err)
		assert.True(t, ok, "%q reads as closed", garbage)
		assert.False(t, mr.Exists(b.key("s")), "%q: the closed state, no key, replaces it", garbage)
	}
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

// TestBreakersConcurrentWorkers has many workers, each with its own client
// (as separate processes would), record failures for one subscription on
// real Redis, so the compare-and-set writes really conflict.
func TestBreakersConcurrentWorkers(t *testing.T) {
	t.Parallel()
	prefix := redistest.Prefix(t)
	cfg := domain.BreakerConfig{FailureThreshold: 50, OpenDuration: time.Minute, HalfOpenProbes: 1}
	now := time.Now()
	const workers, each = 10, 10
	var opened atomic.Int32
	var wg sync.WaitGroup
	for range workers {
		b := NewBreakers(redistest.Client(t), prefix)
		wg.Go(func() {
			for range each {
				s, err := b.Record(t.Context(), "s", cfg, false, now)
				if !assert.NoError(t, err) {
					return
				}
				if s.Phase == domain.BreakerOpen && s.Failures == cfg.FailureThreshold {
					opened.Add(1)
				}
			}
		})
	}
	wg.Wait()
	// 100 failures, threshold 50: the 50th opens it, the other 50 find it
	// open and return it unchanged.
	assert.Equal(t, int32(workers*each-cfg.FailureThreshold+1), opened.Load())
}

func TestBreakersInvalidPrefixPanics(t *testing.T) {
	t.Parallel()
	client := goredis.NewClient(&goredis.Options{})
	defer client.Close()
	assert.Panics(t, func() { NewBreakers(client, "a{b}:") })
	assert.Panics(t, func() { NewRateLimiter(client, "}") })
	assert.Panics(t, func() { NewSemaphore(client, "{") })
	assert.Panics(t, func() { NewSemaphore(nil, "") })
	assert.Equal(t, DefaultPrefix+"{sub:x}:breaker", NewBreakers(client, "").key("x"))
}

// --- RateLimiter ----------------------------------------------------------

// TestRateLimiter runs the suite on real Redis in real time. redis_rate puts
// "rate:" before the key, so those keys are outside the test's prefix and
// are deleted separately (they also expire within a second).
func TestRateLimiter(t *testing.T) {
	protectiontest.RunRateLimiter(t, func(t *testing.T) ports.RateLimiter {
		client, prefix := redistest.Client(t), redistest.Prefix(t)
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			assert.NoError(t, redistest.DeleteKeys(ctx, client, "rate:"+prefix))
		})
		return NewRateLimiter(client, prefix)
	}, protectiontest.Features{RateBurst: RateBurst})
}

// miniRateLimiter is a RateLimiter on its own miniredis, whose clock the
// suite drives.
type miniRateLimiter struct {
	*RateLimiter
	clock *miniClock
}

// TestRateLimiterMiniredis runs the suite on miniredis with its clock
// stopped: redis_rate's script reads TIME, which follows SetTime, so the
// suite checks budgets exactly.
func TestRateLimiterMiniredis(t *testing.T) {
	protectiontest.RunRateLimiter(t, func(t *testing.T) ports.RateLimiter {
		clock, client := newMiniClock(t)
		return miniRateLimiter{RateLimiter: NewRateLimiter(client, ""), clock: clock}
	}, protectiontest.Features{
		RateBurst:          RateBurst,
		AdvanceRateLimiter: func(t *testing.T, l ports.RateLimiter, d time.Duration) { l.(miniRateLimiter).clock.advance(d) },
	})
}

func TestRateBurst(t *testing.T) {
	t.Parallel()
	for perSecond, want := range map[int]int{1: 1, 9: 1, 10: 1, 20: 2, 100: 10, 10000: 1000} {
		assert.Equal(t, want, RateBurst(perSecond), "RateBurst(%d)", perSecond)
	}
}

// TestRateLimiterKey checks the key (with redis_rate's "rate:" in front and
// the hash tag intact), that it expires, and that a bad rate is an error.
func TestRateLimiterKey(t *testing.T) {
	t.Parallel()
	clock, client := newMiniClock(t)
	l := NewRateLimiter(client, "p:")
	ctx := t.Context()
	ok, _, err := l.Take(ctx, "s1", 10)
	require.NoError(t, err)
	require.True(t, ok)
	keys, err := client.Keys(ctx, "*").Result()
	require.NoError(t, err)
	assert.Equal(t, []string{"rate:p:{sub:s1}:rate"}, keys)
	clock.advance(2 * time.Second)
	keys, err = client.Keys(ctx, "*").Result()
	require.NoError(t, err)
	assert.Empty(t, keys, "the key expires once the budget is full again")

	_, _, err = l.Take(ctx, "s1", 0)
	assert.ErrorContains(t, err, "at least 1")
}

// --- Semaphore ------------------------------------------------------------

func TestSemaphore(t *testing.T) {
	protectiontest.RunSemaphore(t, func(t *testing.T) ports.Semaphore {
		return NewSemaphore(redistest.Client(t), redistest.Prefix(t))
	}, protectiontest.Features{})
}

// miniSemaphore is a Semaphore on its own miniredis, whose clock the suite
// drives.
type miniSemaphore struct {
	*Semaphore
	clock *miniClock
}

// TestSemaphoreMiniredis runs the suite on miniredis with its clock
// stopped: the script reads TIME, which follows SetTime, and EVALSHA works
// (go-redis falls back to EVAL on the first NOSCRIPT, as on a fresh Redis).
func TestSemaphoreMiniredis(t *testing.T) {
	protectiontest.RunSemaphore(t, func(t *testing.T) ports.Semaphore {
		clock, client := newMiniClock(t)
		return miniSemaphore{Semaphore: NewSemaphore(client, ""), clock: clock}
	}, protectiontest.Features{
		AdvanceSemaphore: func(t *testing.T, s ports.Semaphore, d time.Duration) { s.(miniSemaphore).clock.advance(d) },
	})
}

// TestSemaphoreKey checks the key layout, that the key lives as long as the
// longest lease and no longer, and that the scores are lease ends by the
// server's clock.
func TestSemaphoreKey(t *testing.T) {
	t.Parallel()
	clock, client := newMiniClock(t)
	s := NewSemaphore(client, "p:")
	ctx := t.Context()
	key := "p:{sub:s1}:inflight"
	require.Equal(t, key, s.key("s1"))

	require.True(t, acquireOK(t, s, "s1", "long", 10, time.Minute))
	require.True(t, acquireOK(t, s, "s1", "short", 10, time.Second))
	score, err := client.ZScore(ctx, key, "short").Result()
	require.NoError(t, err)
	assert.Equal(t, float64(clock.now.Add(time.Second).UnixMilli()), score, "score is the lease's end in Unix ms by Redis's TIME")
	ttl, err := client.PTTL(ctx, key).Result()
	require.NoError(t, err)
	assert.Equal(t, time.Minute, ttl, "the key lives as long as the longest lease")

	clock.advance(time.Minute)
	n, err := client.Exists(ctx, key).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "an abandoned key goes away with its last lease")
}

// TestSemaphoreKeyRealRedis checks on real Redis that the key lives as
// long as its longest lease (the score arrives in the script as a string
// from ZRANGE, which PEXPIREAT must accept).
func TestSemaphoreKeyRealRedis(t *testing.T) {
	t.Parallel()
	client, prefix := redistest.Client(t), redistest.Prefix(t)
	s := NewSemaphore(client, prefix)
	require.True(t, acquireOK(t, s, "s1", "long", 10, time.Minute))
	require.True(t, acquireOK(t, s, "s1", "short", 10, time.Second))
	ttl, err := client.PTTL(t.Context(), prefix+"{sub:s1}:inflight").Result()
	require.NoError(t, err)
	assert.InDelta(t, time.Minute.Seconds(), ttl.Seconds(), 2)
}

// TestSemaphoreRenew checks that a holder acquiring again renews its lease
// and keeps its slot even when all are taken.
func TestSemaphoreRenew(t *testing.T) {
	t.Parallel()
	clock, client := newMiniClock(t)
	s := NewSemaphore(client, "")
	require.True(t, acquireOK(t, s, "s", "a", 2, time.Second))
	require.True(t, acquireOK(t, s, "s", "b", 2, time.Second))
	clock.advance(900 * time.Millisecond)
	assert.True(t, acquireOK(t, s, "s", "a", 2, time.Second), "a holder renews its lease even when all slots are taken")
	clock.advance(200 * time.Millisecond)
	assert.True(t, acquireOK(t, s, "s", "c", 2, time.Second), "b's lease ran out")
	assert.False(t, acquireOK(t, s, "s", "d", 2, time.Second), "a's renewed lease still counts")
}

func TestSemaphoreInvalidArguments(t *testing.T) {
	t.Parallel()
	_, client := redistest.Mini(t)
	s := NewSemaphore(client, "")
	ctx := t.Context()
	for _, tc := range []struct {
		holder string
		limit  int
		ttl    time.Duration
	}{{"", 1, time.Second}, {"h", 0, time.Second}, {"h", 1, 0}, {"h", 1, -time.Second}} {
		_, err := s.TryAcquire(ctx, "s", tc.holder, tc.limit, tc.ttl)
		assert.Error(t, err, "holder %q limit %d ttl %s", tc.holder, tc.limit, tc.ttl)
	}
	ok, err := s.TryAcquire(ctx, "s", "h", 1, time.Microsecond)
	require.NoError(t, err)
	assert.True(t, ok, "a ttl under a millisecond is rounded up, not zero")
}

func acquireOK(t *testing.T, s ports.Semaphore, sub, holder string, limit int, ttl time.Duration) bool {
	t.Helper()
	ok, err := s.TryAcquire(t.Context(), sub, holder, limit, ttl)
	require.NoError(t, err)
	return ok
}

// --- Benchmarks -----------------------------------------------------------

// BenchmarkBreakersAllowClosed is the hot path of every delivery: a closed
// breaker lets it through, one GET.
func BenchmarkBreakersAllowClosed(b *testing.B) {
	br := NewBreakers(redistest.Client(b), redistest.Prefix(b))
	ctx, cfg, now := b.Context(), domain.DefaultBreakerConfig(), time.Now()
	for b.Loop() {
		if _, _, err := br.Allow(ctx, "s", cfg, now); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBreakersRecordSuccessClosed is the other half of a healthy
// delivery: a success on a closed breaker, one GET.
func BenchmarkBreakersRecordSuccessClosed(b *testing.B) {
	br := NewBreakers(redistest.Client(b), redistest.Prefix(b))
	ctx, cfg, now := b.Context(), domain.DefaultBreakerConfig(), time.Now()
	for b.Loop() {
		if _, err := br.Record(ctx, "s", cfg, true, now); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBreakersRecordFailure is a failing endpoint: every failure
// changes the state (counted; the breaker never opens here), the
// transactional path.
func BenchmarkBreakersRecordFailure(b *testing.B) {
	br := NewBreakers(redistest.Client(b), redistest.Prefix(b))
	ctx, now := b.Context(), time.Now()
	cfg := domain.BreakerConfig{FailureThreshold: domain.MaxBreakerFailureThreshold, OpenDuration: time.Second, HalfOpenProbes: 1}
	i := 0
	for b.Loop() {
		if i%(cfg.FailureThreshold-1) == 0 {
			if _, err := br.Record(ctx, "s", cfg, true, now); err != nil {
				b.Fatal(err)
			}
		}
		i++
		if _, err := br.Record(ctx, "s", cfg, false, now); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRateLimiterTake is one Take (one EVALSHA), under a rate high
// enough that most are allowed.
func BenchmarkRateLimiterTake(b *testing.B) {
	client, prefix := redistest.Client(b), redistest.Prefix(b)
	b.Cleanup(func() { _ = redistest.DeleteKeys(context.Background(), client, "rate:"+prefix) })
	l := NewRateLimiter(client, prefix)
	ctx := b.Context()
	for b.Loop() {
		if _, _, err := l.Take(ctx, "s", domain.MaxRateLimit); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSemaphoreAcquireRelease is what each delivery pays for the
// concurrency cap: one EVALSHA and one ZREM.
func BenchmarkSemaphoreAcquireRelease(b *testing.B) {
	s := NewSemaphore(redistest.Client(b), redistest.Prefix(b))
	ctx := b.Context()
	for b.Loop() {
		ok, err := s.TryAcquire(ctx, "s", "h", domain.DefaultMaxInFlight, time.Minute)
		if err != nil || !ok {
			b.Fatal(ok, err)
		}
		if err := s.Release(ctx, "s", "h"); err != nil {
			b.Fatal(err)
		}
	}
}
