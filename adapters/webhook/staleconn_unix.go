//go:build unix

package webhook

import (
	"errors"
	"syscall"
)

// closedByPeer peeks at the socket without blocking: end of stream, or a
// reset, means the peer has closed it. Pending bytes (a TLS session ticket,
// say) or nothing to read mean it is open.
func closedByPeer(raw syscall.RawConn) bool {
	var (
		buf    [1]byte
		n      int
		peekEr error
	)
	err := raw.Read(func(fd uintptr) bool {
		n, _, peekEr = syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return true // never wait for readiness
	})
	if err != nil {
		return true // the descriptor is closed
	}
	if peekEr != nil {
		return !errors.Is(peekEr, syscall.EAGAIN) && !errors.Is(peekEr, syscall.EINTR)
	}
	return n == 0
}
