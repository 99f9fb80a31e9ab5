package application

import (
	"context"
	"sync"
	"time"

	"github.com/dispatch-webhooks/dispatch/domain"
)

// rateWait is how long, at most, a delivery that the rate limit refused
// waits in its worker for the limit's next request before it is postponed
// through PostgreSQL and the scheduler's next scan (a second or so later,
// and two more transactions).
const rateWait = 100 * time.Millisecond

// rateWaiters counts, per subscription, this process's deliveries waiting
// for the rate limit's next request. The zero value is ready to use.
type rateWaiters struct {
	mu     sync.Mutex
	counts map[string]int
}

// add counts one more waiter of sub unless limit wait already, and
// reports how many were waiting before it.
func (w *rateWaiters) add(sub string, limit int) (ahead int, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ahead = w.counts[sub]
	if ahead >= limit {
		return ahead, false
	}
	if w.counts == nil {
		w.counts = make(map[string]int)
	}
	w.counts[sub] = ahead + 1
	return ahead, true
}

// leave stops counting one waiter of sub.
func (w *rateWaiters) leave(sub string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.counts[sub] <= 1 {
		delete(w.counts, sub)
		return
	}
	w.counts[sub]--
}

// rateWaitLimit is how many deliveries of sub may wait for its rate limit
// at once: as many as the limit lets through in rateWait, and no more than
// it may have in flight. A limit slower than that never waits.
func rateWaitLimit(sub domain.Subscription) int {
	return min(sub.RateLimit*int(rateWait/time.Millisecond)/1000, sub.MaxInFlight)
}

// awaitRate waits in this process for the rate limit's next request after
// protect found none left (due at until), and asks the protections again,
// for as long as the delivery would otherwise have been postponed
// (rateWait). Waiters are spread: the one with n others already waiting
// asks n of the limit's intervals after until, so that they come in the
// order the limit lets them through instead of all at once. It returns
// what the last protect decided; a refusal whose wait ends past the
// deadline, or with too many waiting already, is returned as it is.
func (uc *Deliver) awaitRate(ctx context.Context, d domain.Delivery, sub domain.Subscription, until time.Time, degraded error) (
	_ time.Time, reason string, pass passed, _ error,
) {
	ahead, ok := uc.throttled.add(sub.ID, rateWaitLimit(sub))
	if !ok {
		return until, domain.ReasonThrottled, passedAlone, degraded
	}
	defer uc.throttled.leave(sub.ID)
	interval := time.Second / time.Duration(sub.RateLimit)
	start := time.Now()
	for {
		wait := max(until.Sub(uc.Clock.Now()), 0) + time.Duration(ahead+1)*interval
		if time.Since(start)+wait > rateWait {
			return until, domain.ReasonThrottled, passedAlone, degraded
		}
		time.Sleep(wait)
		until, reason, pass, degraded = uc.protect(ctx, d, sub, uc.Clock.Now())
		if reason != domain.ReasonThrottled {
			return until, reason, pass, degraded
		}
		ahead = 0 // asked again: the requests went to those before it
	}
}
