package redis

import (
	"context"
	"fmt"
	"time"

	"github.com/go-redis/redis_rate/v10"
	goredis "github.com/redis/go-redis/v9"

	"github.com/dispatch-webhooks/dispatch/ports"
)

// RateBurst is the burst RateLimiter allows at perSecond requests a second:
// a tenth of a second's worth, at least 1. GCRA lets burst requests through
// at once and then one every 1/perSecond s, so any 1-second window at the
// endpoint sees at most perSecond + RateBurst(perSecond) requests (110 at
// the default 100/s), while workers that picked up a batch together are not
// turned away for being a few milliseconds early.
func RateBurst(perSecond int) int {
	return max(1, perSecond/10)
}

// RateLimiter is ports.RateLimiter on Redis: GCRA (the generic cell rate
// algorithm) per subscription, by github.com/go-redis/redis_rate. Each
// subscription is one key holding its theoretical arrival time, updated by
// one Lua script (EVALSHA) per Take, so all workers share the budget
// exactly. The script reads the Redis server's clock (TIME), so workers
// with skewed clocks agree. The key is "rate:<prefix>{sub:<id>}:rate":
// redis_rate puts "rate:" in front of every key; the hash tag survives it.
// A key expires as soon as the subscription's budget is full again.
// The burst is RateBurst(perSecond). Safe for concurrent use.
type RateLimiter struct {
	limiter *redis_rate.Limiter
	prefix  string
}

var _ ports.RateLimiter = (*RateLimiter)(nil)

// NewRateLimiter returns a RateLimiter keeping its state under prefix (""
// means DefaultPrefix). The caller owns client and closes it. A nil client
// or a prefix with '{' or '}' (which would break the hash tag) is a
// programming error and panics.
func NewRateLimiter(client goredis.UniversalClient, prefix string) *RateLimiter {
	prefix = checkedPrefix("rate limiter", client, prefix)
	return &RateLimiter{limiter: redis_rate.NewLimiter(client), prefix: prefix}
}

// key is the subscription's key before redis_rate adds "rate:".
func (r *RateLimiter) key(subscriptionID string) string {
	return r.prefix + "{sub:" + subscriptionID + "}:rate"
}

// Take takes one request from subscriptionID's budget; see
// ports.RateLimiter. perSecond below 1 is an error.
func (r *RateLimiter) Take(ctx context.Context, subscriptionID string, perSecond int) (bool, time.Duration, error) {
	if perSecond < 1 {
		return false, 0, fmt.Errorf("redis rate limiter: %s: rate must be at least 1 request per second, got %d", subscriptionID, perSecond)
	}
	limit := redis_rate.Limit{Rate: perSecond, Burst: RateBurst(perSecond), Period: time.Second}
	res, err := r.limiter.Allow(ctx, r.key(subscriptionID), limit)
	if err != nil {
		return false, 0, fmt.Errorf("redis rate limiter: take from %s: %w", subscriptionID, interpretError(err))
	}
	if res.Allowed > 0 {
		return true, 0, nil
	}
	return false, rateRetryAfter(res.RetryAfter), nil
}

// rateRetryAfter is the wait the GCRA script reported, as Take reports it.
// The script computes in float seconds from TIME's microseconds: round up
// to a whole microsecond so that retrying after it is not turned away for
// a rounding error, and never report "now".
func rateRetryAfter(d time.Duration) time.Duration {
	return max((d + time.Microsecond - 1).Truncate(time.Microsecond), time.Microsecond)
}
