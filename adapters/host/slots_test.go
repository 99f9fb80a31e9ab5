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
	a := host.Join(dir)
	if got := a.Peers(); got != 1 {
		t.Fatalf("one worker: Peers = %d, want 1", got)
	}
	b, c := host.Join(dir), host.Join(dir)
	for _, s := range []*host.Slot{a, b, c} {
		if got := s.Peers(); got != 3 {
			t.Fatalf("three workers: Peers = %d, want 3", got)
		}
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if got := a.Peers(); got != 2 {
		t.Fatalf("after the second left (its slot free between two held): Peers = %d, want 2", got)
	}
	d := host.Join(dir) // takes the freed slot
	if got := c.Peers(); got != 3 {
		t.Fatalf("after another joined: Peers = %d, want 3", got)
	}
	for _, s := range []*host.Slot{a, c, d} {
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
	if got := s.Peers(); got != 1 {
		t.Errorf("Peers of a solitary slot = %d, want 1", got)
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close of a solitary slot = %v", err)
	}
}
