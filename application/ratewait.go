package application

import (
	"context"
	"sync"
	"time"

	"github.com/dispatch-webhooks/dispatch/domain"
)

// rateWait is how long, at most, a delivery that the rate limit refused
// waits in its worker for the limit's next request before it is postponed:
// the scheduler's default interval between scans, since a postponed
// delivery comes back no sooner than the next scan (and costs two more
// transactions).
const rateWait = time.Second

// rateWaiters paces, per subscription, this process's deliveries waiting
// for the rate limit's next request: each is given a time to ask again,
// one of the limit's intervals after the last one given, so that they ask
// in turn, at the limit's pace, instead of all at once. The zero value is
// ready to use.
type rateWaiters struct {
	mu   sync.Mutex
	subs map[string]*rateLine
}

// rateLine is one subscription's waiters.
type rateLine struct {
	waiting int
	// next is the earliest time the next turn may be given.
	next time.Time
}

// join counts one more waiter of sub, unless limit wait already.
func (w *rateWaiters) join(sub string, limit int) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	line := w.subs[sub]
	if line == nil {
		if limit < 1 {
			return false
		}
		if w.subs == nil {
			w.subs = make(map[string]*rateLine)
		}
		line = &rateLine{}
		w.subs[sub] = line
	}
	if line.waiting >= limit {
		return false
	}
	line.waiting++
	return true
}

// turn gives a waiter of sub its time to ask again: at the limit's next
// request (at), or an interval after the last turn given, whichever is
// later; unless that is after latest, when no turn is given (ok false).
func (w *rateWaiters) turn(sub string, at, latest time.Time, interval time.Duration) (_ time.Time, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	line := w.subs[sub]
	if line.next.After(at) {
		at = line.next
	}
	if at.After(latest) {
		return time.Time{}, false
	}
	line.next = at.Add(interval)
	return at, true
}

// leave stops counting a waiter of sub.
func (w *rateWaiters) leave(sub string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	line := w.subs[sub]
	if line.waiting--; line.waiting == 0 {
		delete(w.subs, sub)
	}
}

// rateWaitLimit is how many deliveries of sub may wait for its rate limit
// at once: as many as the limit lets through in rateWait, and no more than
// it may have in flight.
func rateWaitLimit(sub domain.Subscription) int {
	return min(sub.RateLimit*int(rateWait/time.Second), sub.MaxInFlight)
}

// awaitRate waits in this process for the rate limit's next request after
// protect found none left (due at until), and asks the protections again,
// for as long as the delivery would otherwise have been postponed
// (rateWait), taking turns with the subscription's other waiters
// (rateWaiters). It returns what the last protect decided; a refusal whose
// turn would come past the wait, or with too many waiting already, is
// returned as it is. A delivery waits holding what awaitSlot's hold: its
// claim, its request slot (Requests) and its consumer's slot.
func (uc *Deliver) awaitRate(ctx context.Context, d domain.Delivery, sub domain.Subscription, until time.Time, degraded error) (
	_ time.Time, reason string, pass passed, _ error,
) {
	if !uc.throttled.join(sub.ID, rateWaitLimit(sub)) {
		return until, domain.ReasonThrottled, passedAlone, degraded
	}
	defer uc.throttled.leave(sub.ID)
	interval := time.Second / time.Duration(sub.RateLimit)
	start := time.Now()
	for {
		now := uc.Clock.Now()
		at, ok := uc.throttled.turn(sub.ID, until, now.Add(rateWait-time.Since(start)), interval)
		if !ok {
			return until, domain.ReasonThrottled, passedAlone, degraded
		}
		time.Sleep(at.Sub(now))
		until, reason, pass, degraded = uc.protect(ctx, d, sub, uc.Clock.Now())
		if reason != domain.ReasonThrottled {
			return until, reason, pass, degraded
		}
	}
}
