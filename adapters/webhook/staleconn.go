package webhook

import (
	"errors"
	"net"
	"syscall"
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
type checkedConn struct {
	net.Conn
	raw syscall.RawConn // nil when the connection cannot be peeked at
	// read is set once a response has been read: the next write starts
	// another request on a kept-alive connection (HTTP/1.1, no pipelining).
	read bool
}

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
	c.read = true
	return c.Conn.Read(p)
}

func (c *checkedConn) Write(p []byte) (int, error) {
	if c.read {
		c.read = false
		if closedByPeer(c.raw) {
			return 0, errStaleConn
		}
	}
	return c.Conn.Write(p)
}
