package application

import (
	"sync"
	"time"
)

// requeueWithin is how far off, at most, a postponed delivery's due time
// may be for its worker to append it to the stream again itself
// (requeueAt): the scheduler's default interval between scans, which
// finds the later ones when they are due.
const requeueWithin = time.Second

// turns paces, per subscription, this process's postponed deliveries: each
// is postponed to a turn one interval after the last turn given, so that
// they come back one by one, at the pace at which they may pass (the rate
// limit's, or that of the endpoint's requests ending), instead of all at
// once to be refused again. A turn costs nothing until it comes: the
// delivery waits in the store, not in the worker. The zero value is ready
// to use.
type turns struct {
	mu sync.Mutex
	// next is, per subscription, the earliest time its next turn may be
	// given; a time passed means no turn is pending.
	next map[string]time.Time
	// kept is how many subscriptions the last sweep of next kept.
	kept int
}

// turn gives a refused delivery of sub its time to ask again: at (when it
// may pass at the soonest), or an interval after the last turn given,
// whichever is later.
func (r *turns) turn(sub string, at, now time.Time, interval time.Duration) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if next := r.next[sub]; next.After(at) {
		at = next
	}
	if r.next == nil {
		r.next = make(map[string]time.Time)
	}
	r.next[sub] = at.Add(interval)
	if len(r.next) > 2*r.kept+64 {
		r.sweep(now)
	}
	return at
}

// sweep forgets the subscriptions whose turns have all come, so that next
// holds only those still throttled; r.mu is held. Sweeping only when next
// has doubled since keeps it amortised constant per turn.
func (r *turns) sweep(now time.Time) {
	for sub, next := range r.next {
		if !next.After(now) {
			delete(r.next, sub)
		}
	}
	r.kept = len(r.next)
}
