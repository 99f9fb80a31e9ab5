package host

import (
	"os"
	"path/filepath"
	"strconv"
)

// MaxSlots bounds how many worker processes Slots counts on one machine.
const MaxSlots = 256

// DefaultSlotDir is the folder of the lock files every Dispatch worker on
// the machine shares, whichever deployment it belongs to: they share the
// processors too.
func DefaultSlotDir() string { return filepath.Join(os.TempDir(), "dispatch-workers") }

// Slot is one worker process's place among those on the machine: a lock
// file it holds for as long as it runs. The kernel releases the lock when
// the process ends, however it ends, so a crashed worker's slot comes free
// without anyone cleaning up.
type Slot struct {
	dir  string
	file *os.File // nil when no lock could be taken: the worker counts alone
}

// Join takes the lowest free slot in dir (created if need be). It never
// fails: where no lock can be taken (no such folder can be made, every
// slot is held, locks are not supported) the slot is a solitary one, and
// Peers answers 1.
func Join(dir string) *Slot {
	s := &Slot{dir: dir}
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return s
	}
	_ = os.Chmod(dir, 0o777|os.ModeSticky) // workers of every user share it
	for i := range MaxSlots {
		f, err := os.OpenFile(slotPath(dir, i), os.O_RDWR|os.O_CREATE, 0o666)
		if err != nil {
			continue
		}
		if held, err := tryLock(f, true); err == nil && held {
			s.file = f
			return s
		}
		_ = f.Close()
	}
	return s
}

// Peers is how many worker processes hold a slot in the folder now, this
// one included; 1 for a solitary slot. It reads the slots in order and
// stops at the first that was never made.
func (s *Slot) Peers() int {
	if s.file == nil {
		return 1
	}
	n := 0
	for i := range MaxSlots {
		f, err := os.Open(slotPath(s.dir, i))
		if err != nil {
			break
		}
		if free, err := tryLock(f, false); err == nil && !free {
			n++
		}
		_ = f.Close() // also releases a lock this check took
	}
	return max(n, 1)
}

// Close gives the slot up.
func (s *Slot) Close() error {
	if s.file == nil {
		return nil
	}
	err := s.file.Close()
	s.file = nil
	return err
}

func slotPath(dir string, i int) string {
	return filepath.Join(dir, "slot-"+strconv.Itoa(i))
}
