package redis

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dispatch-webhooks/dispatch/ports"
)

//go:embed semaphore.lua
var semaphoreAcquireLua string

// semaphoreAcquire runs by EVALSHA, falling back to EVAL (which caches the
// script) the first time a server has not seen it.
var semaphoreAcquire = goredis.NewScript(semaphoreAcquireLua)

// Semaphore is ports.Semaphore on Redis: each subscription's leases are a
// sorted set, "<prefix>{sub:<id>}:inflight", member the holder and score
// the lease's expiry in Unix ms. TryAcquire is one Lua script (EVALSHA) that
// drops expired leases, counts, and adds the holder; Release is ZREM.
// Expiry is measured by the Redis server's clock (TIME in the script), so
// workers with skewed clocks agree; the key expires with its longest lease,
// so an abandoned subscription leaves nothing behind.
//
// TryAcquire for a holder that already has a slot renews its lease and
// succeeds even when every slot is taken. Safe for concurrent use.
type Semaphore struct {
	client goredis.UniversalClient
	prefix string
}

var _ ports.Semaphore = (*Semaphore)(nil)

// NewSemaphore returns a Semaphore keeping its leases under prefix (""
// means DefaultPrefix). The caller owns client and closes it. A nil client
// or a prefix with '{' or '}' (which would break the hash tag) is a
// programming error and panics.
func NewSemaphore(client goredis.UniversalClient, prefix string) *Semaphore {
	return &Semaphore{client: client, prefix: checkedPrefix("semaphore", client, prefix)}
}

// key is the subscription's lease set.
func (s *Semaphore) key(subscriptionID string) string {
	return s.prefix + "{sub:" + subscriptionID + "}:inflight"
}

// TryAcquire takes a slot for holder; see ports.Semaphore. ttl is counted in
// whole milliseconds, rounded up. An empty holder, a limit below 1 or a ttl
// of 0 or less is an error.
func (s *Semaphore) TryAcquire(ctx context.Context, subscriptionID, holder string, limit int, ttl time.Duration) (bool, error) {
	if err := checkSemaphoreArgs(subscriptionID, holder, limit, ttl); err != nil {
		return false, fmt.Errorf("redis semaphore: %w", err)
	}
	ttlMS := (ttl + time.Millisecond - 1).Milliseconds()
	n, err := semaphoreAcquire.Run(ctx, s.client, []string{s.key(subscriptionID)}, holder, limit, ttlMS).Int()
	if err != nil {
		return false, fmt.Errorf("redis semaphore: acquire %s for %s: %w", subscriptionID, holder, interpretError(err))
	}
	return n == 1, nil
}

// Release gives holder's slot back with ZREM, which ignores a holder that
// has none.
func (s *Semaphore) Release(ctx context.Context, subscriptionID, holder string) error {
	if err := s.client.ZRem(ctx, s.key(subscriptionID), holder).Err(); err != nil {
		return fmt.Errorf("redis semaphore: release %s of %s: %w", holder, subscriptionID, interpretError(err))
	}
	return nil
}

// checkSemaphoreArgs rejects what no caller should pass, before anything is
// sent, so that a bad argument is never mistaken for an unreachable Redis.
func checkSemaphoreArgs(subscriptionID, holder string, limit int, ttl time.Duration) error {
	switch {
	case holder == "":
		return fmt.Errorf("%s: holder is empty", subscriptionID)
	case limit < 1:
		return fmt.Errorf("%s: limit must be at least 1, got %d", subscriptionID, limit)
	case ttl <= 0:
		return fmt.Errorf("%s: lease ttl must be positive, got %s", subscriptionID, ttl)
	}
	return nil
}
