package domain_test

import (
	"testing"
	"time"

	"github.com/dispatch-webhooks/dispatch/domain"
)

// steady returns a Linger with max that has seen arrivals every gap for a
// while, n items at a time.
func steady(max, gap time.Duration, n int) *domain.Linger {
	l := &domain.Linger{Max: max}
	now := time.Unix(1_700_000_000, 0)
	for range 100 {
		l.Arrived(now, n)
		now = now.Add(gap)
	}
	return l
}

// first returns a Linger with max that has seen one arrival.
func first(max time.Duration) *domain.Linger {
	l := &domain.Linger{Max: max}
	l.Arrived(time.Unix(1_700_000_000, 0), 1)
	return l
}

func TestLingerWait(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name        string
		linger      *domain.Linger
		have, limit int
		wait        time.Duration
		more        int
	}{
		{"nothing seen yet never waits", &domain.Linger{Max: 5 * ms}, 1, 100, 0, 0},
		{"the first arrival never waits, however long Max", first(time.Hour), 1, 100, 0, 0},
		{"no Max never waits", steady(0, ms/10, 1), 1, 100, 0, 0},
		{"sparse traffic never waits", steady(5*ms, 10*ms, 1), 1, 100, 0, 0},
		{"full batch never waits", steady(5*ms, ms/10, 1), 100, 100, 0, 0},
		{"overfull batch never waits", steady(5*ms, ms/10, 1), 120, 100, 0, 0},
		{"one expected within Max: waits for it", steady(5*ms, 5*ms, 1), 1, 100, 5 * ms, 1},
		{"steady traffic waits Max for what comes", steady(5*ms, ms, 1), 1, 100, 5 * ms, 5},
		{"heavy traffic waits only to fill the batch", steady(5*ms, ms/100, 1), 90, 100, 10 * (ms / 100), 10},
		{"items arriving together count one by one", steady(8*ms, 4*ms, 4), 1, 100, 8 * ms, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wait, more := tc.linger.Wait(tc.have, tc.limit)
			// The moving average keeps a trace of where it started.
			near := wait >= tc.wait && wait <= tc.wait+tc.wait/100
			if !near || more != tc.more {
				t.Errorf("Wait(%d, %d) = %s, %d; want %s, %d", tc.have, tc.limit, wait, more, tc.wait, tc.more)
			}
		})
	}
}

// TestLingerFollowsTheRate checks that the estimate follows a change of
// rate at once: a quiet spell stops the waits, and the first gap of the
// traffic after it brings them back.
func TestLingerFollowsTheRate(t *testing.T) {
	l := steady(5*time.Millisecond, time.Millisecond, 1)
	if wait, _ := l.Wait(1, 100); wait == 0 {
		t.Fatal("steady traffic: no wait")
	}
	now := time.Unix(1_800_000_000, 0) // an hour later
	l.Arrived(now, 1)
	if wait, _ := l.Wait(1, 100); wait != 0 {
		t.Fatalf("first arrival after a quiet spell waits %s", wait)
	}
	l.Max = time.Hour
	if wait, _ := l.Wait(1, 100); wait != 0 {
		t.Fatalf("first arrival after a quiet spell waits %s with Max an hour", wait)
	}
	l.Max = 5 * time.Millisecond
	arrivals := 0
	for wait, _ := l.Wait(1, 100); wait == 0; wait, _ = l.Wait(1, 100) {
		now = now.Add(time.Millisecond)
		l.Arrived(now, 1)
		arrivals++
		if arrivals > 50 {
			t.Fatal("still not waiting after 50 arrivals 1 ms apart")
		}
	}
	if arrivals != 1 {
		t.Errorf("waits again after %d arrivals 1 ms apart, want after the first", arrivals)
	}
	// Then the average moves a quarter of the way per gap.
	for range 2 {
		now = now.Add(9 * time.Millisecond)
		l.Arrived(now, 1)
	}
	if wait, _ := l.Wait(1, 100); wait == 0 {
		t.Error("two slow gaps after a steady stream stopped the waits at once")
	}
}

// TestLingerClockGoingBack checks that an arrival stamped before the last
// one counts as arriving with it, not as a negative gap.
func TestLingerClockGoingBack(t *testing.T) {
	l := steady(5*time.Millisecond, time.Millisecond, 1)
	now := time.Unix(1_000_000_000, 0) // before steady's arrivals
	for range 10 {
		l.Arrived(now, 1)
	}
	wait, more := l.Wait(1, 100)
	if wait <= 0 || wait > l.Max || more < 1 {
		t.Errorf("after arrivals stamped in the past: Wait = %s, %d; want a wait of at most %s", wait, more, l.Max)
	}
}

func TestLingerPatience(t *testing.T) {
	l := steady(5*time.Millisecond, time.Millisecond, 1)
	if p := l.Patience(); p < 4*time.Millisecond || p > 4*time.Millisecond+time.Microsecond {
		t.Errorf("Patience after arrivals 1 ms apart = %s, want 4ms", p)
	}
}
