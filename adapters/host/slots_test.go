package host_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/dispatch-webhooks/dispatch/adapters/host"
)

func TestSlotsCountTheWorkersThatHoldThem(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "workers")
	census := func(t *testing.T, step string, want map[*host.Slot]host.Census) {
		t.Helper()
		for s, w := range want {
			if got := s.Census(); got != w {
				t.Fatalf("%s: Census = %+v, want %+v", step, got, w)
			}
		}
	}
	a := host.Join(dir)
	census(t, "one worker", map[*host.Slot]host.Census{a: {Peers: 1, Ahead: 0}})
	b, c := host.Join(dir), host.Join(dir)
	census(t, "three workers", map[*host.Slot]host.Census{
		a: {Peers: 3, Ahead: 0}, b: {Peers: 3, Ahead: 1}, c: {Peers: 3, Ahead: 2},
	})
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	census(t, "after the second left (its slot free between two held)", map[*host.Slot]host.Census{
		a: {Peers: 2, Ahead: 0}, c: {Peers: 2, Ahead: 1},
	})
	d := host.Join(dir) // takes the freed slot, ahead of c
	census(t, "after another joined", map[*host.Slot]host.Census{
		a: {Peers: 3, Ahead: 0}, d: {Peers: 3, Ahead: 1}, c: {Peers: 3, Ahead: 2},
	})
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	census(t, "after the first left", map[*host.Slot]host.Census{
		d: {Peers: 2, Ahead: 0}, c: {Peers: 2, Ahead: 1},
	})
	for _, s := range []*host.Slot{c, d} {
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 3 {
		t.Errorf("slot files = %d, want 3: a freed slot is reused, not added", len(entries))
	}
}

func TestASlotThatCannotBeTakenCountsAlone(t *testing.T) {
	t.Parallel()
	// A file where the folder should be: no slot can be made there.
	blocked := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(blocked, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s := host.Join(filepath.Join(blocked, "workers"))
	if got, want := s.Census(), (host.Census{Peers: 1}); got != want {
		t.Errorf("Census of a solitary slot = %+v, want %+v", got, want)
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close of a solitary slot = %v", err)
	}
}
