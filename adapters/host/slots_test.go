package host_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/dispatch-webhooks/dispatch/adapters/host"
)

// TestSlotsCountTheWorkersThatHoldThem runs alone, not in parallel: a
// process started meanwhile (TestAKilledWorkersSlotComesFree's) holds a
// copy of every open file, and so of their locks, from its fork until its
// exec, and a slot closed then would still be seen held.
func TestSlotsCountTheWorkersThatHoldThem(t *testing.T) {
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

// TestHelperHoldsASlot is not a test of its own: TestAKilledWorkersSlotComesFree
// runs the test binary as a worker process that holds a slot until killed.
func TestHelperHoldsASlot(t *testing.T) {
	dir := os.Getenv("DISPATCH_TEST_SLOT_DIR")
	if dir == "" {
		return // run as an ordinary test: nothing to hold
	}
	host.Join(dir)
	fmt.Println("holding")
	select {} // until killed
}

// TestAKilledWorkersSlotComesFree kills a worker process that holds the
// first slot, without letting it close anything: the kernel releases its
// lock, so the worker behind it becomes the first at its next count, as
// a standing-by worker must when the reading one dies.
func TestAKilledWorkersSlotComesFree(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "workers")
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperHoldsASlot$")
	cmd.Env = append(os.Environ(), "DISPATCH_TEST_SLOT_DIR="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "holding\n" {
		t.Fatalf("the worker process said %q, %v; want it holding a slot", line, err)
	}

	behind := host.Join(dir)
	defer behind.Close()
	if got, want := behind.Census(), (host.Census{Peers: 2, Ahead: 1}); got != want {
		t.Fatalf("behind a live worker: Census = %+v, want %+v", got, want)
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL: nothing runs after it
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if got, want := behind.Census(), (host.Census{Peers: 1, Ahead: 0}); got != want {
		t.Errorf("after the worker ahead was killed: Census = %+v, want %+v", got, want)
	}
}
