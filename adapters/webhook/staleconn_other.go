//go:build !unix

package webhook

import "syscall"

// closedByPeer cannot peek here; a closed connection is found when the
// request fails on it, and retryStale sends it again.
func closedByPeer(syscall.RawConn) bool { return false }
