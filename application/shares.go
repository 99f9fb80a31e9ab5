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
//
// A delivery over its subscription's share may wait in the worker, parked
// (see park), for the next of that subscription's requests to end, which
// hands it its place and its request slot: at a steady share, deliveries
// then flow without a trip through the store each.
type requestShares struct {
	mu sync.Mutex
	// subs are the subscriptions with requests in flight.
	subs map[string]*share
	// parked counts the deliveries parked, in every share.
	parked int
}

// share is one subscription's requests in flight in the worker.
type share struct {
	held int
	// since is when its requests in flight last went from none to one.
	since time.Time
	// took is a moving average of how long its requests took, zero until
	// one ended.
	took time.Duration
	// queue holds its parked deliveries, oldest first.
	queue []*parked
}

// parked is a delivery waiting in the worker for a place in its share.
type parked struct {
	// resume runs the delivery in the place (and request slot) of a
	// request of its subscription that ended; it must not block.
	resume func(requestSlot)
	// expire postpones the delivery, taken out of its share without a
	// place (unpark, unparkAll).
	expire func()
}

// parkFor is how long a delivery may wait parked: a small part of the
// lease its claim holds beyond its subscription's timeout (leaseMargin),
// so that its attempt still ends within the lease.
const parkFor = leaseMargin / 4

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

// park parks p in sub's share, unless sub is under its share now (take
// would count it), or the wait for a place is likely longer than parkFor:
// its parked deliveries, p included, at one place every every. Parked
// deliveries are at most capacity in all, and a share's at most its
// limit. ok tells whether p was parked.
func (s *requestShares) park(sub string, maxInFlight, capacity int, every time.Duration, p *parked) (ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sh := s.subs[sub]
	if sh == nil || s.parked >= capacity {
		return false
	}
	limit := max(min(maxInFlight, fairShare(capacity, len(s.subs))), 1)
	waiting := len(sh.queue) + 1
	if sh.held < limit || waiting > limit || time.Duration(waiting)*every > parkFor {
		return false
	}
	sh.queue = append(sh.queue, p)
	s.parked++
	return true
}

// unpark takes p out of sub's share, if it is still parked there.
func (s *requestShares) unpark(sub string, p *parked) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	sh := s.subs[sub]
	if sh == nil {
		return false
	}
	for i, q := range sh.queue {
		if q == p {
			sh.queue = append(sh.queue[:i], sh.queue[i+1:]...)
			s.parked--
			return true
		}
	}
	return false
}

// unparkAll takes every parked delivery out of its share.
func (s *requestShares) unparkAll() []*parked {
	s.mu.Lock()
	defer s.mu.Unlock()
	var all []*parked
	for _, sh := range s.subs {
		all = append(all, sh.queue...)
		sh.queue = nil
	}
	s.parked = 0
	return all
}

// give stops counting a request of sub that take counted, which took
// that long (0 when no request was made: it was postponed after all),
// unless a delivery of sub is parked: then the place is next's, the
// oldest parked, which the caller resumes.
func (s *requestShares) give(sub string, took time.Duration) (next *parked) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sh := s.subs[sub]
	if took > 0 {
		if sh.took == 0 {
			sh.took = took
		} else {
			sh.took += (took - sh.took) / 8
		}
	}
	if len(sh.queue) > 0 {
		next = sh.queue[0]
		sh.queue[0] = nil
		sh.queue = sh.queue[1:]
		s.parked--
		return next
	}
	if sh.held--; sh.held <= 0 {
		delete(s.subs, sub)
	}
	return nil
}

// fairShare is how many of a worker's capacity one of subscriptions
// competing subscriptions may hold: capacity/(subscriptions+1), and at
// least one request, so that every subscription makes progress.
func fairShare(capacity, subscriptions int) int {
	return max(capacity/(subscriptions+1), 1)
}
