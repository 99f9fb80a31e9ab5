package application

import "sync"

// slotWaiters queues the deliveries of one worker process that found every
// concurrency slot of their subscription taken. When a request of this
// process to that subscription ends, its slot goes back and the oldest
// waiter is woken to ask for it, instead of the delivery being postponed
// through PostgreSQL and the scheduler's next scan, by which time the slot
// has often gone to whichever delivery of the stream came next, or stayed
// idle. The zero value is ready to use.
type slotWaiters struct {
	mu sync.Mutex
	// queues holds each subscription's waiters, oldest first; a waiter is
	// woken by closing its channel.
	queues map[string][]chan struct{}
}

// add queues a waiter for subscription sub, unless limit are queued
// already: more waiters than slots could not all be served by the
// requests in flight before they give up.
func (w *slotWaiters) add(sub string, limit int) (wake chan struct{}, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.queues[sub]) >= max(limit, 1) {
		return nil, false
	}
	if w.queues == nil {
		w.queues = make(map[string][]chan struct{})
	}
	wake = make(chan struct{})
	w.queues[sub] = append(w.queues[sub], wake)
	return wake, true
}

// wake wakes the oldest waiter of sub, if any.
func (w *slotWaiters) wake(sub string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	q := w.queues[sub]
	if len(q) == 0 {
		return
	}
	close(q[0])
	w.pop(sub, 0)
}

// leave takes a waiter that gave up out of the queue. If it had been woken
// meanwhile, the wake passes to the next waiter, so that no freed slot is
// left unclaimed by a waiter's timing out.
func (w *slotWaiters) leave(sub string, wake chan struct{}) {
	w.mu.Lock()
	q := w.queues[sub]
	for i, c := range q {
		if c == wake {
			w.pop(sub, i)
			w.mu.Unlock()
			return
		}
	}
	w.mu.Unlock()
	w.wake(sub)
}

// pop removes the i-th waiter of sub; w.mu is held.
func (w *slotWaiters) pop(sub string, i int) {
	q := append(w.queues[sub][:i], w.queues[sub][i+1:]...)
	if len(q) == 0 {
		delete(w.queues, sub)
		return
	}
	w.queues[sub] = q
}
