package domain

import (
	"bytes"
	"errors"
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

func TestDeliveryIDIsDeterministicAndInItsEventsTime(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 29, 4, 15, 0, 123e6, time.UTC)
	ev, err := NewID(EventIDPrefix, at, bytes.NewReader(bytes.Repeat([]byte{0xab}, 10)))
	if err != nil {
		t.Fatal(err)
	}
	later := at.Add(time.Hour)
	tests := []struct {
		name            string
		event, sub      string
		wantTime        time.Time
		sameAs, otherTo [2]string
	}{
		{name: "an event id gives its time", event: ev, sub: "sub_a", wantTime: at},
		{name: "another subscription", event: ev, sub: "sub_b", wantTime: at},
		{name: "not an event id falls back", event: "evt_1", sub: "sub_a", wantTime: later.Truncate(time.Millisecond)},
		{name: "a delivery id is not an event id", event: "dlv" + ev[3:], sub: "sub_a", wantTime: later.Truncate(time.Millisecond)},
	}
	seen := map[string]string{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := DeliveryID(tt.event, tt.sub, later)
			if !IsID(DeliveryIDPrefix, id) {
				t.Fatalf("%q is not a delivery id", id)
			}
			if again := DeliveryID(tt.event, tt.sub, later.Add(time.Minute)); tt.wantTime.Equal(at) && again != id {
				t.Errorf("the same pair gave %s then %s", id, again)
			}
			got, err := IDTime(DeliveryIDPrefix, id)
			if err != nil {
				t.Fatal(err)
			}
			if !got.Equal(tt.wantTime) {
				t.Errorf("time %v, want %v", got, tt.wantTime)
			}
			if id < IDBound(DeliveryIDPrefix, tt.wantTime) || id >= IDBound(DeliveryIDPrefix, tt.wantTime.Add(time.Millisecond)) {
				t.Errorf("%s is outside its millisecond's bounds", id)
			}
		})
		id := DeliveryID(tt.event, tt.sub, later)
		if prev, ok := seen[id]; ok {
			t.Errorf("%s and %s got the same id", prev, tt.name)
		}
		seen[id] = tt.name
	}
	// The pair is hashed unambiguously: moving a byte across the boundary
	// changes the id.
	if DeliveryID(ev+"x", "sub", later) == DeliveryID(ev, "xsub", later) {
		t.Error("(e+x, sub) and (e, xsub) share an id")
	}
}

func TestIDTimeAndIDBound(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 29, 4, 15, 0, 0, time.UTC)
	tests := []struct {
		prefix, id string
		want       time.Time
		wantErr    bool
	}{
		{EventIDPrefix, IDBound(EventIDPrefix, at), at, false},
		{DeliveryIDPrefix, IDBound(DeliveryIDPrefix, time.UnixMilli(0)), time.UnixMilli(0).UTC(), false},
		{EventIDPrefix, "evt_7ZZZZZZZZZZZZZZZZZZZZZZZZZ", time.UnixMilli(1<<48 - 1).UTC(), false},
		{EventIDPrefix, "evt_1", time.Time{}, true},
		{EventIDPrefix, IDBound(DeliveryIDPrefix, at), time.Time{}, true},
	}
	for _, tt := range tests {
		got, err := IDTime(tt.prefix, tt.id)
		if tt.wantErr {
			if !errors.Is(err, ErrInvalidID) {
				t.Errorf("IDTime(%q, %q): error %v, want ErrInvalidID", tt.prefix, tt.id, err)
			}
			continue
		}
		if err != nil || !got.Equal(tt.want) {
			t.Errorf("IDTime(%q, %q) = %v, %v; want %v", tt.prefix, tt.id, got, err, tt.want)
		}
	}
	ones := bytes.Repeat([]byte{0xff}, 10)
	if a, b := IDBound(EventIDPrefix, at), must(NewID(EventIDPrefix, at, bytes.NewReader(make([]byte, 10)))); a > b {
		t.Errorf("bound %s sorts after an id made at its time, %s", a, b)
	}
	if a, b := must(NewID(EventIDPrefix, at.Add(-time.Millisecond), bytes.NewReader(ones))), IDBound(EventIDPrefix, at); a >= b {
		t.Errorf("an id made before the bound, %s, sorts at or after it, %s", a, b)
	}
}

func FuzzIDTime(f *testing.F) {
	f.Add("evt_01J0000000000000000000000")
	f.Add(IDBound(EventIDPrefix, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)))
	f.Add("evt_")
	f.Fuzz(func(t *testing.T, id string) {
		at, err := IDTime(EventIDPrefix, id)
		if err != nil {
			if IsID(EventIDPrefix, id) {
				t.Fatalf("IDTime rejected the valid id %q: %v", id, err)
			}
			return
		}
		// The bound of the id's own time is at or below it, the next
		// millisecond's above it.
		if IDBound(EventIDPrefix, at) > id || IDBound(EventIDPrefix, at.Add(time.Millisecond)) <= id && at.UnixMilli() < 1<<48-1 {
			t.Fatalf("%q decoded to %v, outside that millisecond's bounds", id, at)
		}
		if d := DeliveryID(id, "sub_a", time.Time{}); d[4:14] != id[4:14] {
			t.Fatalf("delivery id %s does not carry the time digits of %s", d, id)
		}
	})
}

func must(s string, err error) string {
	if err != nil {
		panic(err)
	}
	return s
}
