package application

import (
	"testing"
	"time"
)

// TestRequestSharesAreFair: a subscription may take a request while it
// holds fewer than its max_in_flight and capacity/(n+1), n counting the
// subscriptions holding requests, itself included; what it gives back is
// free again, and a subscription with none held is no longer counted.
func TestRequestSharesAreFair(t *testing.T) {
	t.Parallel()
	type step struct {
		sub         string
		give        bool // give one back instead of taking one
		maxInFlight int
		want        bool
	}
	tests := []struct {
		name     string
		capacity int
		steps    []step
	}{
		{"alone: half the capacity", 8, []step{
			{sub: "a", maxInFlight: 100, want: true},
			{sub: "a", maxInFlight: 100, want: true},
			{sub: "a", maxInFlight: 100, want: true},
			{sub: "a", maxInFlight: 100, want: true},
			{sub: "a", maxInFlight: 100, want: false},
		}},
		{"alone: its max_in_flight", 8, []step{
			{sub: "a", maxInFlight: 2, want: true},
			{sub: "a", maxInFlight: 2, want: true},
			{sub: "a", maxInFlight: 2, want: false},
		}},
		{"a newcomer finds room beside one at its share", 8, []step{
			{sub: "a", maxInFlight: 100, want: true},
			{sub: "a", maxInFlight: 100, want: true},
			{sub: "a", maxInFlight: 100, want: true},
			{sub: "a", maxInFlight: 100, want: true},
			{sub: "b", maxInFlight: 100, want: true},
			{sub: "b", maxInFlight: 100, want: true},
			{sub: "b", maxInFlight: 100, want: false}, // 8/3
			// a is over its share of two: it takes none until it is
			// below it.
			{sub: "a", give: true},
			{sub: "a", maxInFlight: 100, want: false},
			{sub: "a", give: true},
			{sub: "a", give: true},
			{sub: "a", maxInFlight: 100, want: true},
		}},
		{"the share grows back as others go idle", 8, []step{
			{sub: "a", maxInFlight: 100, want: true},
			{sub: "b", maxInFlight: 100, want: true},
			{sub: "b", maxInFlight: 100, want: true},
			{sub: "b", maxInFlight: 100, want: false},
			{sub: "a", give: true},
			{sub: "b", maxInFlight: 100, want: true},
			{sub: "b", maxInFlight: 100, want: true},
			{sub: "b", maxInFlight: 100, want: false},
		}},
		{"at least one each", 2, []step{
			{sub: "a", maxInFlight: 100, want: true},
			{sub: "a", maxInFlight: 100, want: false},
			{sub: "b", maxInFlight: 100, want: true},
			{sub: "c", maxInFlight: 100, want: true},
			{sub: "c", maxInFlight: 100, want: false},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var s requestShares
			for i, st := range tt.steps {
				if st.give {
					s.give(st.sub, time.Second)
					continue
				}
				held := 0
				if sh := s.subs[st.sub]; sh != nil {
					held = sh.held
				}
				if got, _ := s.take(st.sub, st.maxInFlight, tt.capacity, base); got != st.want {
					t.Fatalf("step %d: %s takes one holding %d = %v, want %v", i, st.sub, held, got, st.want)
				}
			}
		})
	}
}

// TestRequestSharesForgetIdleSubscriptions: a subscription that gave back
// every request is no longer counted or remembered.
func TestRequestSharesForgetIdleSubscriptions(t *testing.T) {
	t.Parallel()
	var s requestShares
	s.take("a", 10, 8, base)
	s.take("a", 10, 8, base)
	s.give("a", time.Second)
	s.give("a", time.Second)
	if len(s.subs) != 0 {
		t.Errorf("%d subscriptions counted after every request was given back, want none", len(s.subs))
	}
}

// TestRequestSharesTellHowOftenAPlaceFrees: a subscription refused its
// share is told how often one of its requests may be expected to end:
// before any ended, how long they have been in flight over its share;
// then a moving average of how long they took over its share, which a
// request postponed after its admission does not move.
func TestRequestSharesTellHowOftenAPlaceFrees(t *testing.T) {
	t.Parallel()
	var s requestShares
	for range 4 {
		s.take("a", 100, 8, base)
	}
	if ok, every := s.take("a", 100, 8, base.Add(2*time.Second)); ok || every != 500*time.Millisecond {
		t.Errorf("a fifth request after 2 s = %v, every %s; want refused, every 500ms (2 s over a share of 4)", ok, every)
	}
	s.give("a", 400*time.Millisecond)
	s.take("a", 100, 8, base.Add(2*time.Second))
	// One postponed after all (no request made) tells nothing.
	s.give("a", 0)
	s.take("a", 100, 8, base.Add(2*time.Second))
	if ok, every := s.take("a", 100, 8, base.Add(3*time.Second)); ok || every != 100*time.Millisecond {
		t.Errorf("after a request of 400 ms = %v, every %s; want refused, every 100ms (400 ms over 4)", ok, every)
	}
	s.give("a", 1200*time.Millisecond)
	s.take("a", 100, 8, base.Add(3*time.Second))
	// (400 ms + (1200 ms - 400 ms)/8) / 4
	if ok, every := s.take("a", 100, 8, base.Add(3*time.Second)); ok || every != 125*time.Millisecond {
		t.Errorf("after one more of 1.2 s = %v, every %s; want refused, every 125ms", ok, every)
	}
}

var base = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
