package application

import (
	"context"
	"fmt"
	"sync"

	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// activeSubscriptions is a process's copy of the active subscriptions, as
// an index for matching, brought up to date by the changes since it was
// last (ports.SubscriptionStore.SubscriptionChanges) rather than loaded
// whole: with many subscriptions, a load per batch or per change cost more
// than the fan-out itself. The zero value is an empty copy, loaded whole
// on first use.
type activeSubscriptions struct {
	mu     sync.Mutex
	index  *domain.SubscriptionIndex
	cursor int64
}

// match brings the copy up to date with store, so that it holds every
// change committed before the call, and calls match with its index, which
// match may read only during the call.
func (c *activeSubscriptions) match(ctx context.Context, store ports.SubscriptionStore, match func(*domain.SubscriptionIndex)) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.index == nil {
		c.index, c.cursor = domain.NewSubscriptionIndex(), 0
	}
	changes, err := store.SubscriptionChanges(ctx, c.cursor, func(changed []domain.Subscription) {
		for _, s := range changed {
			c.index.Put(s)
		}
	})
	if err != nil {
		// What was put is as new as the store had it, so the copy stays
		// valid at its cursor; but a first load tells no deletions, so a
		// part of one is dropped.
		if c.cursor == 0 {
			c.index = nil
		}
		return fmt.Errorf("subscription changes since %d: %w", c.cursor, err)
	}
	for _, id := range changes.Deleted {
		c.index.Remove(id)
	}
	c.cursor = changes.Cursor
	match(c.index)
	return nil
}
