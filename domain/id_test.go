package domain

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestNewIDIsPrefixedAndSortsByTime(t *testing.T) {
	t.Parallel()
	early := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a, err := NewID(EventIDPrefix, early, bytes.NewReader(bytes.Repeat([]byte{0xff}, 10)))
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewID(EventIDPrefix, early.Add(time.Millisecond), bytes.NewReader(make([]byte, 10)))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(a, EventIDPrefix) || len(a) != len(EventIDPrefix)+26 {
		t.Errorf("id %q: want evt_ and 26 characters", a)
	}
	if a >= b {
		t.Errorf("%s made a millisecond earlier does not sort before %s", a, b)
	}
	if _, err := NewID("x_", early, bytes.NewReader(nil)); err == nil {
		t.Error("NewID ignored a failing random source")
	}
}

func TestMustNewIDIsMonotonicWithinAMillisecond(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	prev := MustNewID(DeliveryIDPrefix, now)
	for i := range 10000 {
		next := MustNewID(DeliveryIDPrefix, now)
		if next <= prev {
			t.Fatalf("id %d: %s does not sort after %s", i, next, prev)
		}
		prev = next
	}
	// A clock that steps back does not break the order either.
	if back := MustNewID(DeliveryIDPrefix, now.Add(-time.Second)); back <= prev {
		t.Errorf("after the clock stepped back, %s sorts before %s", back, prev)
	}
}

func TestIsID(t *testing.T) {
	t.Parallel()
	good := MustNewID(EventIDPrefix, time.Now())
	tests := []struct {
		prefix, s string
		want      bool
	}{
		{EventIDPrefix, good, true},
		{DeliveryIDPrefix, good, false},
		{EventIDPrefix, "evt_", false},
		{EventIDPrefix, good + "0", false},
		{EventIDPrefix, good[:len(good)-1], false},
		{EventIDPrefix, "evt_8" + good[5:], false},
		{EventIDPrefix, "evt_0" + "U" + good[6:], false}, // U is not Crockford
		{EventIDPrefix, strings.ToLower(good), false},
		{EventIDPrefix, "", false},
	}
	for _, tt := range tests {
		if got := IsID(tt.prefix, tt.s); got != tt.want {
			t.Errorf("IsID(%q, %q) = %v, want %v", tt.prefix, tt.s, got, tt.want)
		}
	}
}

func FuzzIsID(f *testing.F) {
	f.Add(MustNewID(DeliveryIDPrefix, time.Now()))
	f.Add("dlv_")
	f.Add("dlv_zzzzzzzzzzzzzzzzzzzzzzzzzz")
	f.Fuzz(func(t *testing.T, s string) {
		if IsID(DeliveryIDPrefix, s) && (len(s) != 30 || !strings.HasPrefix(s, DeliveryIDPrefix)) {
			t.Fatalf("IsID accepted %q", s)
		}
	})
}
