package application

import "testing"

func woken(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// TestSlotWaitersWakeOldestFirst: each freed slot wakes one waiter, the
// oldest of its own subscription.
func TestSlotWaitersWakeOldestFirst(t *testing.T) {
	var w slotWaiters
	a1, _ := w.add("a", 5)
	b1, _ := w.add("b", 5)
	a2, _ := w.add("a", 5)
	w.wake("a")
	if !woken(a1) || woken(a2) || woken(b1) {
		t.Fatalf("woken a1 %v a2 %v b1 %v; want a1 alone", woken(a1), woken(a2), woken(b1))
	}
	w.wake("a")
	w.wake("a") // nobody left: nothing happens
	if !woken(a2) || woken(b1) {
		t.Fatalf("woken a2 %v b1 %v; want a2 alone", woken(a2), woken(b1))
	}
	if _, left := w.queues["a"]; left {
		t.Error("an empty queue is kept")
	}
}

// TestSlotWaitersLeave: a waiter that gives up leaves the queue; if it was
// woken just before, its wake goes to the next waiter.
func TestSlotWaitersLeave(t *testing.T) {
	var w slotWaiters
	first, _ := w.add("a", 5)
	second, _ := w.add("a", 5)
	third, _ := w.add("a", 5)
	w.leave("a", second) // still queued: just leaves
	if woken(first) || woken(third) || len(w.queues["a"]) != 2 {
		t.Fatalf("after a queued waiter left: woken %v %v, %d queued; want none woken, 2 queued", woken(first), woken(third), len(w.queues["a"]))
	}
	w.wake("a")
	w.leave("a", first) // woken, but gave up at the same moment
	if !woken(third) || len(w.queues["a"]) != 0 {
		t.Errorf("third woken %v, %d queued; want the wake passed on to it", woken(third), len(w.queues["a"]))
	}
}

// TestSlotWaitersCap: no more waiters than limit per subscription (at
// least one).
func TestSlotWaitersCap(t *testing.T) {
	var w slotWaiters
	for i := range 3 {
		if _, ok := w.add("a", 3); !ok {
			t.Fatalf("waiter %d refused under the limit", i+1)
		}
	}
	if _, ok := w.add("a", 3); ok {
		t.Error("a fourth waiter queued with limit 3")
	}
	if _, ok := w.add("b", 0); !ok {
		t.Error("limit 0 refused the first waiter")
	}
}
