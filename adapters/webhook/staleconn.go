package webhook

import (
	"errors"
	"net"
	"syscall"
	"time"
)

// errStaleConn reports a pooled connection that the endpoint closed while
// it sat idle. Nothing was sent on it, so the request goes again at once on
// another (retryStale).
var errStaleConn = errors.New("kept-alive connection was closed by the endpoint")

// checkedConn checks, before a request goes out on a connection that has
// already carried one, that the endpoint has not closed it meanwhile.
// Servers close idle keep-alive connections after their own timeout (5 s
// in Node.js and Apache). net/http notices that close at once, since a
// goroutine of each connection reads it even while it idles; fasthttp's
// client reads only when it waits for an answer, so without this check the
// next request would go out on the dead connection and fail after the
// endpoint might have been sent part of it.
//
// The peek is a system call of its own, so a connection that was reading an
// answer less than peekAfterIdle ago is not peeked at: no server closes
// idle connections that soon (keep-alive timeouts are seconds: gunicorn's
// 2, Node.js's and Apache's 5, nginx's 75), and a busy worker reuses its
// connections within milliseconds. An endpoint that hangs up right after
// answering can do so after a peek just as well; the first try's EOF or
// reset sends such a request once more (retryStale).
//
// fasthttp's own retry (Client.RetryIfErr, MaxIdemponentCallAttempts)
// cannot replace the peek: it is not told whether the failed connection
// came from the pool, so it cannot tell a connection that died while idle
// from an endpoint that hangs up on a fresh one. With the peek off,
// TestSendGoesAgainOnAConnectionTheEndpointClosed loses sends that meet a
// second closed connection when retrying once, and retrying every such
// failure sends a request to an endpoint that always hangs up once per
// allowed attempt instead of twice (TestSendTriesTwiceAnEndpointThatHangsUp).
type checkedConn struct {
	net.Conn
	raw syscall.RawConn // nil when the connection cannot be peeked at
	// read is set once a response has been read: the next write starts
	// another request on a kept-alive connection (HTTP/1.1, no pipelining).
	read bool
	// readAt is when a read last returned.
	readAt time.Time
}

// peekAfterIdle is how long a connection must have been quiet before a
// request on it peeks first.
const peekAfterIdle = 100 * time.Millisecond

func newCheckedConn(c net.Conn) net.Conn {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return c
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return c
	}
	return &checkedConn{Conn: c, raw: raw}
}

func (c *checkedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.read, c.readAt = true, time.Now()
	return n, err
}

func (c *checkedConn) Write(p []byte) (int, error) {
	if c.read {
		c.read = false
		if time.Since(c.readAt) >= peekAfterIdle && closedByPeer(c.raw) {
			return 0, errStaleConn
		}
	}
	return c.Conn.Write(p)
}
