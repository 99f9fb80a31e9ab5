package application

import (
	"testing"
	"time"
)

// TestRateWaitersTakeTurns: the waiters of one subscription are given
// turns an interval apart, starting at the limit's next request; a later
// next request moves the turns on; a turn past the latest is not given;
// another subscription's turns are its own.
func TestRateWaitersTakeTurns(t *testing.T) {
	t.Parallel()
	var w rateWaiters
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for range 3 {
		if !w.join("a", 3) {
			t.Fatal("a waiter of a was refused below the limit")
		}
	}
	if w.join("a", 3) {
		t.Error("a fourth waiter of a joined; the limit is 3")
	}
	if !w.join("b", 1) {
		t.Fatal("b's first waiter was refused")
	}
	const interval = 10 * time.Millisecond
	steps := []struct {
		sub  string
		at   time.Duration // the limit's next request, after base
		want time.Duration
	}{
		{"a", 5 * time.Millisecond, 5 * time.Millisecond},
		{"a", 5 * time.Millisecond, 15 * time.Millisecond},
		{"a", 0, 25 * time.Millisecond},
		{"b", 5 * time.Millisecond, 5 * time.Millisecond},
		{"a", 100 * time.Millisecond, 100 * time.Millisecond},
		{"a", 0, 110 * time.Millisecond},
	}
	for i, s := range steps {
		got, ok := w.turn(s.sub, base.Add(s.at), base.Add(time.Second), interval)
		if !ok || got.Sub(base) != s.want {
			t.Errorf("turn %d of %s = +%s, %v; want +%s", i, s.sub, got.Sub(base), ok, s.want)
		}
	}
	// A turn past the latest is not given, and gives none away.
	if _, ok := w.turn("a", base, base.Add(115*time.Millisecond), interval); ok {
		t.Error("a turn at +120ms was given with +115ms the latest")
	}
	if got, ok := w.turn("a", base, base.Add(time.Second), interval); !ok || got.Sub(base) != 120*time.Millisecond {
		t.Errorf("the next turn = +%s, %v; want +120ms", got.Sub(base), ok)
	}
	for range 3 {
		w.leave("a")
	}
	w.leave("b")
	if len(w.subs) != 0 {
		t.Errorf("%d subscriptions still have waiters, want none", len(w.subs))
	}
	if w.join("c", 0) {
		t.Error("a waiter joined with a limit of 0")
	}
}
