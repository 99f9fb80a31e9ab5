package application

import (
	"sync"
	"time"
)

// requestShares divides a worker's request capacity (Deliver.Requests)
// among the subscriptions whose requests it holds, so that a slow or
// hanging endpoint ties up no more than its share of it (SPEC §2,
// Isolation). A subscription may start a request only while it has fewer
// in flight in this worker than its share: its max_in_flight, and no more
// than capacity/(n+1), n counting the subscriptions with requests in
// flight, itself included. The share grows as others go idle, up to half
// the capacity for a subscription alone: a request in flight cannot be
// taken back, so the "+1" keeps room for the next subscription to arrive
// without waiting for a hanging one's timeouts (with n subscriptions at
// their share, capacity/(n+1) is free, more than a newcomer's share). The
// zero value is ready to use.
type requestShares struct {
	mu sync.Mutex
	// subs are the subscriptions with requests in flight.
	subs map[string]*share
}

// share is one subscription's requests in flight in the worker.
type share struct {
	held int
	// since is when its requests in flight last went from none to one.
	since time.Time
	// took is a moving average of how long its requests took, zero until
	// one ended.
	took time.Duration
}

// take counts one more request of sub in a worker of capacity, at now,
// unless sub already holds its share (see requestShares); ok tells which.
// When it does, every is how often one of its requests may be expected to
// end and free a place: how long they take (or, before one ended, how
// long they have been in flight, slotWait at least) over how many it may
// hold.
func (s *requestShares) take(sub string, maxInFlight, capacity int, now time.Time) (ok bool, every time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sh := s.subs[sub]
	subscriptions := len(s.subs)
	if sh == nil {
		subscriptions++
	}
	limit := max(min(maxInFlight, fairShare(capacity, subscriptions)), 1)
	if sh != nil && sh.held >= limit {
		took := sh.took
		if took == 0 {
			// They take at least as long as they have been in flight;
			// just started, they tell nothing yet.
			took = max(now.Sub(sh.since), slotWait)
		}
		return false, took / time.Duration(limit)
	}
	if sh == nil {
		if s.subs == nil {
			s.subs = make(map[string]*share)
		}
		sh = &share{since: now}
		s.subs[sub] = sh
	}
	sh.held++
	return true, 0
}

// give stops counting a request of sub that take counted, which took
// that long (0 when no request was made: it was postponed after all).
func (s *requestShares) give(sub string, took time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sh := s.subs[sub]
	if sh.held--; sh.held <= 0 {
		delete(s.subs, sub)
		return
	}
	if took <= 0 {
		return
	}
	if sh.took == 0 {
		sh.took = took
	} else {
		sh.took += (took - sh.took) / 8
	}
}

// fairShare is how many of a worker's capacity one of subscriptions
// competing subscriptions may hold: capacity/(subscriptions+1), and at
// least one request, so that every subscription makes progress.
func fairShare(capacity, subscriptions int) int {
	return max(capacity/(subscriptions+1), 1)
}
