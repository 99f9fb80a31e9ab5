//go:build unix

package webhook

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCheckedConnPeeksOnlyAfterAQuietSpell: a connection whose endpoint
// has closed it is found stale by the peek, but only once it has been quiet
// for peekAfterIdle; one that was reading an answer just now goes out
// unpeeked.
func TestCheckedConnPeeksOnlyAfterAQuietSpell(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		server, err := ln.Accept()
		if err != nil {
			return
		}
		_, _ = server.Write([]byte("x")) // an answer, then the endpoint hangs up
		_ = server.Close()
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	c, ok := newCheckedConn(conn).(*checkedConn)
	require.True(t, ok, "a TCP connection can be peeked at")

	buf := make([]byte, 1)
	_, err = c.Read(buf)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return closedByPeer(c.raw) }, 5*time.Second, time.Millisecond,
		"the endpoint's close to arrive")

	c.read, c.readAt = true, time.Now()
	_, err = c.Write([]byte("a"))
	assert.False(t, errors.Is(err, errStaleConn), "read from just now: not peeked at, got %v", err)

	c.read, c.readAt = true, time.Now().Add(-peekAfterIdle)
	_, err = c.Write([]byte("b"))
	assert.ErrorIs(t, err, errStaleConn, "quiet for peekAfterIdle: peeked at, and found closed")
}
