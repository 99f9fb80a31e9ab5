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
	dir   string
	index int      // which slot this is: slot-<index> in dir
	file  *os.File // nil when no lock could be taken: the worker counts alone
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
			s.file, s.index = f, i
			return s
		}
		_ = f.Close()
	}
	return s
}

// Census is what a slot's holder sees of the worker processes on its
// machine.
type Census struct {
	// Peers is how many hold a slot, the holder included.
	Peers int
	// Ahead is how many of them hold a lower slot than the holder's: they
	// joined before it, or into a slot freed since. The holders of the
	// lowest slots are the machine's longest-standing workers, and each
	// holder's Ahead is its own, so workers can agree on an order without
	// talking to each other.
	Ahead int
}

// Census counts the worker processes that hold a slot in the folder now,
// this one included; a solitary slot counts alone. It reads the slots in
// order and stops at the first that was never made.
func (s *Slot) Census() Census {
	if s.file == nil {
		return Census{Peers: 1}
	}
	var c Census
	for i := range MaxSlots {
		f, err := os.Open(slotPath(s.dir, i))
		if err != nil {
			break
		}
		if free, err := tryLock(f, false); i == s.index || err == nil && !free {
			c.Peers++
			if i < s.index {
				c.Ahead++
			}
		}
		_ = f.Close() // also releases a lock this check took
	}
	return c
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
