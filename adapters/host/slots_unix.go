//go:build unix

package host

import (
	"errors"
	"os"
	"syscall"
)

// tryLock tries to lock f without waiting: exclusively to hold a slot, or
// shared to see whether anyone holds it. It reports whether the lock was
// taken; an error means locks cannot be used here.
func tryLock(f *os.File, exclusive bool) (bool, error) {
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, syscall.EWOULDBLOCK):
		return false, nil
	}
	return false, err
}
