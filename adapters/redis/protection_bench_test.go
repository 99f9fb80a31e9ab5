package redis

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/dispatch-webhooks/dispatch/adapters/redis/redistest"
	"github.com/dispatch-webhooks/dispatch/domain"
)

// The per-delivery protection sequence on the Redis at REDIS_URL, as
// application.Deliver runs it for a healthy endpoint: the breaker allows,
// the rate limit takes a request, the semaphore takes a slot; after the
// request the slot is released and the success recorded.
//
//	go test -run '^$' -bench BenchmarkDeliveryProtection -count 3 ./adapters/redis/

// BenchmarkDeliveryProtectionSeparate is the sequence through the three
// separate ports, one call each.
func BenchmarkDeliveryProtectionSeparate(b *testing.B) {
	client, prefix := redistest.Client(b), redistest.Prefix(b)
	b.Cleanup(func() { _ = redistest.DeleteKeys(context.Background(), client, "rate:"+prefix) })
	br, l, s := NewBreakers(client, prefix), NewRateLimiter(client, prefix), NewSemaphore(client, prefix)
	ctx, cfg := b.Context(), domain.DefaultBreakerConfig()
	i := 0
	for b.Loop() {
		holder := "h" + strconv.Itoa(i)
		i++
		now := time.Now()
		if ok, _, err := br.Allow(ctx, "s", cfg, now); err != nil || !ok {
			b.Fatal("allow", ok, err)
		}
		if ok, _, err := l.Take(ctx, "s", domain.MaxRateLimit); err != nil {
			b.Fatal("take", ok, err)
		}
		if ok, err := s.TryAcquire(ctx, "s", holder, domain.DefaultMaxInFlight, time.Minute); err != nil || !ok {
			b.Fatal("acquire", ok, err)
		}
		if err := s.Release(ctx, "s", holder); err != nil {
			b.Fatal(err)
		}
		if _, err := br.Record(ctx, "s", cfg, true, now); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDeliveryProtectionSeparateFailing is the same sequence for an endpoint
// that fails now and then (one request in three, never enough in a row to
// open the circuit): each failure changes the breaker, and the next success
// resets it.
func BenchmarkDeliveryProtectionSeparateFailing(b *testing.B) {
	client, prefix := redistest.Client(b), redistest.Prefix(b)
	b.Cleanup(func() { _ = redistest.DeleteKeys(context.Background(), client, "rate:"+prefix) })
	br, l, s := NewBreakers(client, prefix), NewRateLimiter(client, prefix), NewSemaphore(client, prefix)
	ctx, cfg := b.Context(), domain.DefaultBreakerConfig()
	i := 0
	for b.Loop() {
		holder := "h" + strconv.Itoa(i)
		success := i%3 != 0
		i++
		now := time.Now()
		if ok, _, err := br.Allow(ctx, "s", cfg, now); err != nil || !ok {
			b.Fatal("allow", ok, err)
		}
		if ok, _, err := l.Take(ctx, "s", domain.MaxRateLimit); err != nil {
			b.Fatal("take", ok, err)
		}
		if ok, err := s.TryAcquire(ctx, "s", holder, domain.DefaultMaxInFlight, time.Minute); err != nil || !ok {
			b.Fatal("acquire", ok, err)
		}
		if err := s.Release(ctx, "s", holder); err != nil {
			b.Fatal(err)
		}
		if _, err := br.Record(ctx, "s", cfg, success, now); err != nil {
			b.Fatal(err)
		}
	}
}
