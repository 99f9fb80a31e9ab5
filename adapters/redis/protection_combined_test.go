package redis

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatch-webhooks/dispatch/adapters/redis/redistest"
	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
	"github.com/dispatch-webhooks/dispatch/ports/protectiontest"
)

// protectionSet is a Protection on client and prefix, as bootstrap builds
// it.
func protectionSet(client goredis.UniversalClient, prefix string) ports.Protection {
	return NewProtection(client, prefix, ProtectionOptions{})
}

// openBreaker opens sub's breaker through p with cfg.FailureThreshold
// failed requests at now.
func openBreaker(t *testing.T, p ports.Protection, sub string, cfg domain.BreakerConfig, now time.Time) domain.Breaker {
	t.Helper()
	var state domain.Breaker
	for i := range cfg.FailureThreshold {
		holder := fmt.Sprint("fail", i)
		_, err := p.Admit(t.Context(), ports.Admission{
			SubscriptionID: sub, Holder: holder, Breaker: cfg, Now: now,
			PerSecond: domain.MaxRateLimit, MaxInFlight: 1000, Lease: time.Minute,
		})
		require.NoError(t, err)
		state, err = p.Finish(t.Context(), sub, holder, cfg, false, now)
		require.NoError(t, err)
	}
	require.Equal(t, domain.BreakerOpen, state.Phase)
	return state
}

// TestProtection runs the suite on real Redis in real time.
func TestProtection(t *testing.T) {
	protectiontest.RunProtection(t, func(t *testing.T) ports.Protection {
		client, prefix := redistest.Client(t), redistest.Prefix(t)
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			assert.NoError(t, redistest.DeleteKeys(ctx, client, "rate:"+prefix))
		})
		return protectionSet(client, prefix)
	}, protectiontest.Features{RateBurst: RateBurst})
}

// TestProtectionMiniredis runs the suite on miniredis, whose Lua runs the
// scripts (as `dispatch dev` would).
func TestProtectionMiniredis(t *testing.T) {
	protectiontest.RunProtection(t, func(t *testing.T) ports.Protection {
		_, client := redistest.Mini(t)
		return protectionSet(client, "")
	}, protectiontest.Features{RateBurst: RateBurst})
}

// TestProtectionRoundTrips checks what a healthy delivery costs: one
// script to admit and one to finish; and that the rare paths add only the
// breaker's compare-and-set.
func TestProtectionRoundTrips(t *testing.T) {
	t.Parallel()
	client, counter := countingClient(t)
	prefix := redistest.Prefix(t)
	t.Cleanup(func() { _ = redistest.DeleteKeys(context.Background(), client, "rate:"+prefix) })
	p := NewProtection(client, prefix, ProtectionOptions{})
	ctx, cfg, now := t.Context(), domain.DefaultBreakerConfig(), time.Now()
	for _, s := range []*goredis.Script{protectionAdmit, protectionFinish, breakerSwap} {
		require.NoError(t, s.Load(ctx, client).Err())
	}
	counter.take()
	req := ports.Admission{SubscriptionID: "s", Holder: "h", Breaker: cfg, Now: now, PerSecond: 100, MaxInFlight: 10, Lease: time.Minute}

	res, err := p.Admit(ctx, req)
	require.NoError(t, err)
	require.Equal(t, ports.RefusedByNone, res.Refused)
	assert.Equal(t, []string{"EVALSHA"}, counter.take(), "closed breaker: Admit")
	_, err = p.Finish(ctx, "s", "h", cfg, true, now)
	require.NoError(t, err)
	assert.Equal(t, []string{"EVALSHA"}, counter.take(), "closed breaker: Finish a success")

	_, err = p.Admit(ctx, req)
	require.NoError(t, err)
	counter.take()
	state, err := p.Finish(ctx, "s", "h", cfg, false, now)
	require.NoError(t, err)
	assert.Equal(t, 1, state.Failures)
	assert.Equal(t, []string{"EVALSHA", "EVALSHA"}, counter.take(), "a failure: Finish, then the breaker's compare-and-set")

	_, err = p.Admit(ctx, req)
	require.NoError(t, err)
	assert.Equal(t, []string{"EVALSHA"}, counter.take(), "closed breaker with failures: Admit")
	_, err = p.Finish(ctx, "s", "h", cfg, true, now)
	require.NoError(t, err)
	assert.Equal(t, []string{"EVALSHA"}, counter.take(), "a success resets the failures in the script")

	openBreaker(t, p, "s", cfg, now)
	counter.take()
	res, err = p.Admit(ctx, req)
	require.NoError(t, err)
	require.Equal(t, ports.RefusedByBreaker, res.Refused)
	assert.Equal(t, []string{"EVALSHA"}, counter.take(), "open breaker: the script hands it back, no write")
	req.Now = now.Add(cfg.OpenDuration)
	res, err = p.Admit(ctx, req)
	require.NoError(t, err)
	require.Equal(t, ports.RefusedByNone, res.Refused)
	assert.Equal(t, []string{"EVALSHA", "EVALSHA", "EVALSHA"}, counter.take(), "a probe: the script, the breaker's compare-and-set, the script without the breaker")
}

// TestProtectionKeys checks the keys' layout, all in the subscription's
// hash tag.
func TestProtectionKeys(t *testing.T) {
	t.Parallel()
	p := NewProtection(redistest.Client(t), "pfx:", ProtectionOptions{})
	breaker, rate, inflight := p.keys("sub_1")
	assert.Equal(t, "pfx:{sub:sub_1}:breaker", breaker)
	assert.Equal(t, "rate:pfx:{sub:sub_1}:rate", rate)
	assert.Equal(t, "pfx:{sub:sub_1}:inflight", inflight)
	for _, k := range []string{breaker, rate, inflight} {
		assert.Contains(t, k, "{sub:sub_1}")
		assert.Equal(t, 1, strings.Count(k, "{"), "one hash tag in %q", k)
	}
}

// TestProtectionRestsAfterFailure checks that an unreachable Redis costs
// one failed call per RetryInterval, not one per delivery, and that bad
// arguments and the caller's own cancelled context do not count.
func TestProtectionRestsAfterFailure(t *testing.T) {
	t.Parallel()
	mr, client := redistest.Mini(t)
	clock := &fakeClock{now: time.Now()}
	p := NewProtection(client, "", ProtectionOptions{RetryInterval: time.Minute, Timeout: time.Second, Now: clock.Now})
	req := ports.Admission{SubscriptionID: "s", Holder: "h", Breaker: domain.DefaultBreakerConfig(), Now: clock.Now(), PerSecond: 10, MaxInFlight: 1, Lease: time.Minute}

	bad := req
	bad.MaxInFlight = 0
	_, err := p.Admit(t.Context(), bad)
	require.Error(t, err)
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = p.Admit(cancelled, req)
	require.Error(t, err)
	res, err := p.Admit(t.Context(), req)
	require.NoError(t, err, "neither a bad argument nor a cancelled caller makes it rest")
	require.Equal(t, ports.RefusedByNone, res.Refused)

	mr.SetError("unreachable")
	_, err = p.Admit(t.Context(), req)
	require.Error(t, err)
	require.NotErrorIs(t, err, ErrProtectionResting)
	mr.SetError("")
	_, err = p.Admit(t.Context(), req)
	require.ErrorIs(t, err, ErrProtectionResting, "Redis is not asked again before RetryInterval")
	_, err = p.Finish(t.Context(), "s", "h", req.Breaker, true, req.Now)
	require.ErrorIs(t, err, ErrProtectionResting)

	clock.Advance(time.Minute)
	_, err = p.Finish(t.Context(), "s", "h", req.Breaker, true, req.Now)
	require.NoError(t, err, "after RetryInterval Redis is asked again")
}

// BenchmarkDeliveryProtectionCombined is the per-delivery sequence of
// BenchmarkDeliveryProtectionSeparate through Protection: Admit, then
// Finish.
func BenchmarkDeliveryProtectionCombined(b *testing.B) {
	benchmarkCombined(b, func(int) bool { return true })
}

// BenchmarkDeliveryProtectionCombinedFailing is
// BenchmarkDeliveryProtectionSeparateFailing through Protection.
func BenchmarkDeliveryProtectionCombinedFailing(b *testing.B) {
	benchmarkCombined(b, func(i int) bool { return i%3 != 0 })
}

// BenchmarkDeliveryProtectionCombinedParallel is
// BenchmarkDeliveryProtectionCombined from 64 goroutines at once, as a
// worker runs deliveries, over 16 subscriptions: what concurrent calls
// cost when they share round trips. roundtrips/op counts what one delivery
// (Admit and Finish) sends to Redis: 2 without batching.
func BenchmarkDeliveryProtectionCombinedParallel(b *testing.B) {
	benchmarkCombinedParallel(b, ProtectionOptions{})
}

// BenchmarkDeliveryProtectionCombinedParallelUnbatched is
// BenchmarkDeliveryProtectionCombinedParallel with a round trip per call,
// as before batching, to compare on the same machine in the same run.
func BenchmarkDeliveryProtectionCombinedParallelUnbatched(b *testing.B) {
	benchmarkCombinedParallel(b, ProtectionOptions{Unbatched: true})
}

func benchmarkCombinedParallel(b *testing.B, opts ProtectionOptions) {
	benchmarkProtectionParallel(b, func(client goredis.UniversalClient, prefix string) ports.Protection {
		return NewProtection(client, prefix, opts)
	})
}

// benchmarkProtectionParallel runs a delivery's Admit and Finish from 64
// goroutines over 16 subscriptions through the Protection newProtection
// makes, reporting its round trips per delivery.
func benchmarkProtectionParallel(b *testing.B, newProtection func(goredis.UniversalClient, string) ports.Protection) {
	client, trips := roundTripClient(b)
	prefix := redistest.Prefix(b)
	b.Cleanup(func() { _ = redistest.DeleteKeys(context.Background(), client, "rate:"+prefix) })
	p := newProtection(client, prefix)
	ctx, cfg := b.Context(), domain.DefaultBreakerConfig()
	const goroutines, subscriptions = 64, 16
	var next atomic.Int64
	b.SetParallelism(max(1, goroutines/runtime.GOMAXPROCS(0)))
	trips.Store(0)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := next.Add(1)
			sub, holder := "s"+strconv.FormatInt(i%subscriptions, 10), "h"+strconv.FormatInt(i, 10)
			now := time.Now()
			res, err := p.Admit(ctx, ports.Admission{
				SubscriptionID: sub, Holder: holder, Breaker: cfg, Now: now,
				PerSecond: domain.MaxRateLimit, MaxInFlight: domain.DefaultMaxInFlight, Lease: time.Minute,
			})
			if err != nil || res.Refused == ports.RefusedBySemaphore || res.Refused == ports.RefusedByBreaker {
				b.Fatal("admit", res, err)
			}
			if _, err := p.Finish(ctx, sub, holder, cfg, true, now); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.ReportMetric(float64(trips.Load())/float64(b.N), "roundtrips/op")
}

// roundTripClient is a client of its own on the real Redis that counts its
// round trips: each command sent alone, each pipeline.
func roundTripClient(b *testing.B) (goredis.UniversalClient, *atomic.Int64) {
	b.Helper()
	opts, err := goredis.ParseURL(redistest.URL())
	require.NoError(b, err)
	client := goredis.NewClient(opts)
	b.Cleanup(func() { _ = client.Close() })
	hook := &roundTripHook{}
	client.AddHook(hook)
	return client, &hook.trips
}

type roundTripHook struct{ trips atomic.Int64 }

func (h *roundTripHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (h *roundTripHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		h.trips.Add(1)
		return next(ctx, cmd)
	}
}

func (h *roundTripHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		h.trips.Add(1)
		return next(ctx, cmds)
	}
}

func benchmarkCombined(b *testing.B, success func(i int) bool) {
	client, prefix := redistest.Client(b), redistest.Prefix(b)
	b.Cleanup(func() { _ = redistest.DeleteKeys(context.Background(), client, "rate:"+prefix) })
	p := NewProtection(client, prefix, ProtectionOptions{})
	ctx, cfg := b.Context(), domain.DefaultBreakerConfig()
	i := 0
	for b.Loop() {
		holder := "h" + strconv.Itoa(i)
		ok := success(i)
		i++
		now := time.Now()
		res, err := p.Admit(ctx, ports.Admission{
			SubscriptionID: "s", Holder: holder, Breaker: cfg, Now: now,
			PerSecond: domain.MaxRateLimit, MaxInFlight: domain.DefaultMaxInFlight, Lease: time.Minute,
		})
		if err != nil || res.Refused == ports.RefusedBySemaphore || res.Refused == ports.RefusedByBreaker {
			b.Fatal("admit", res, err)
		}
		if _, err := p.Finish(ctx, "s", holder, cfg, ok, now); err != nil {
			b.Fatal(err)
		}
	}
}
