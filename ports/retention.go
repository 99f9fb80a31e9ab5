package ports

import (
	"context"
	"time"
)

// Retention ages the delivery history out (SPEC §5): events, deliveries
// and attempts older than the retention are removed once all of them are
// terminal. Stores that partition history by time (PostgreSQL) also make
// the windows new history goes to.
type Retention interface {
	// MaintainHistory makes room for what arrives until a few windows
	// after now (windows of domain.RetentionWindow(retention)) and removes
	// what ended before now minus retention, unless an event of it is not
	// fanned out yet or a delivery of it is not terminal: that history
	// waits, whole, until it is. Safe to call from every scheduler replica
	// at once: one does the work, the others return Skipped.
	MaintainHistory(ctx context.Context, now time.Time, retention time.Duration) (Maintenance, error)
	// Partitions counts, for each history table (events, deliveries,
	// attempts), the partitions it has; nil from a store without
	// partitions.
	Partitions(ctx context.Context) (map[string]int, error)
}

// Maintenance is what one MaintainHistory call did.
type Maintenance struct {
	// Skipped is true when another replica was maintaining and this call
	// did nothing.
	Skipped bool
	// Created counts the windows made, Dropped those removed, Waiting
	// those past the retention kept for a live event or delivery.
	Created, Dropped, Waiting int
	// LockTimedOut is true when a statement gave up waiting for a lock
	// held by hot traffic; what is left is done next time.
	LockTimedOut bool
	// Took is how long the call held the maintenance lock.
	Took time.Duration
}
