package application

import (
	"testing"
	"time"
)

// TestTurnsComeAtTheirPace: the refused deliveries of one
// subscription are given turns an interval apart, starting at the limit's
// next request; a later next request moves the turns on; another
// subscription's turns are its own.
func TestTurnsComeAtTheirPace(t *testing.T) {
	t.Parallel()
	var r turns
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
		{"b", 0, 15 * time.Millisecond},
	}
	for i, s := range steps {
		if got := r.turn(s.sub, base.Add(s.at), base, interval); got.Sub(base) != s.want {
			t.Errorf("turn %d of %s = +%s, want +%s", i, s.sub, got.Sub(base), s.want)
		}
	}
}

// TestTurnsForgetSubscriptionsNoLongerThrottled: subscriptions whose
// turns have all come are forgotten as others are throttled, so the turns
// take memory for the subscriptions throttled now, not for every one ever
// throttled.
func TestTurnsForgetSubscriptionsNoLongerThrottled(t *testing.T) {
	t.Parallel()
	var r turns
	for i := range 10_000 {
		now := base.Add(time.Duration(i) * time.Second)
		r.turn(string(rune('a'+i%26))+time.Duration(i).String(), now, now, time.Millisecond)
	}
	if n := len(r.next); n > 200 {
		t.Errorf("%d subscriptions remembered after 10,000 throttled one at a time, want a few dozen at most", n)
	}
}
