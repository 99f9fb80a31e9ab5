package loadtest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// keepAliveDoer sends the generated client's requests to one plain-HTTP
// host over a pool of keep-alive connections, each request written and its
// answer read in the caller's goroutine.
//
// The generator shares the machine with what it measures, so what it
// spends per request is taken from Dispatch. net/http's Transport hands
// every request to a connection's writer goroutine and its answer back from
// a reader goroutine: two goroutine wake-ups per request, each a thread
// switch on a busy machine. Here a publisher takes a connection, writes
// the request, reads the answer, and puts the connection back; in a
// profile of W1 that cut what the generator spent on a request from ~110
// to ~60 µs. Writing the request by hand and parsing the answer with
// fasthttp's parser (writeRequest, readResponse) then cut it from 44 to
// 32 µs, of which the two system calls are 16. The answer's body is read
// in full before Do returns, so the connection can go back at once.
type keepAliveDoer struct {
	addr    string
	timeout time.Duration
	dialer  net.Dialer

	mu     sync.Mutex
	idle   []*doerConn
	closed bool
}

type doerConn struct {
	conn net.Conn
	r    *bufio.Reader
	w    *bufio.Writer
	// idleSince is when the connection went back to the pool.
	idleSince time.Time
}

// maxIdle is how long a connection may wait in the pool before it is
// closed rather than used: well within the idle timeout of Dispatch's
// server (2 min), so that a request is not written to a connection the
// server is closing (net/http's transport notices such closes; this pool
// does not read idle connections).
const maxIdle = 30 * time.Second

func newKeepAliveDoer(addr string, timeout time.Duration) *keepAliveDoer {
	return &keepAliveDoer{addr: addr, timeout: timeout, dialer: net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}}
}

// Do sends req and returns its answer with the body already read. A
// connection that fails is closed, and the error returned: like
// net/http for a POST, it does not send the request again, since it
// may have been received.
func (d *keepAliveDoer) Do(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	c, err := d.get(ctx)
	if err != nil {
		return nil, err
	}
	res, interrupted, err := c.roundTrip(ctx, req, d.timeout)
	if err != nil {
		_ = c.conn.Close()
		return nil, err
	}
	if res.Close || req.Close || interrupted {
		_ = c.conn.Close()
	} else {
		d.put(c)
	}
	return res, nil
}

// roundTrip writes req and reads its answer. When ctx ends meanwhile, the
// connection's deadline is moved to the past to unblock it, and
// interrupted is set: the connection must not be used again, even if the
// answer came first.
func (c *doerConn) roundTrip(ctx context.Context, req *http.Request, timeout time.Duration) (_ *http.Response, interrupted bool, _ error) {
	if timeout > 0 {
		if err := c.conn.SetDeadline(time.Now().Add(timeout)); err != nil {
			return nil, false, err
		}
	}
	stop := context.AfterFunc(ctx, func() { _ = c.conn.SetDeadline(time.Unix(1, 0)) })
	defer func() { interrupted = !stop() }()
	if err := writeRequest(c.w, req); err != nil {
		return nil, false, ctxOr(ctx, err)
	}
	if err := c.w.Flush(); err != nil {
		return nil, false, ctxOr(ctx, err)
	}
	res, err := readResponse(c.r, req)
	if err != nil {
		return nil, false, ctxOr(ctx, err)
	}
	return res, false, nil
}

// writeRequest writes req as net/http would. A request without a body or
// with one of known length (every request of the generated client) is
// written by hand: whatever the generator spends is taken from the
// Dispatch it measures, and net/http's writer allocates and copies per
// request. Anything else goes through req.Write.
func writeRequest(w *bufio.Writer, req *http.Request) error {
	if req.Body != nil && (req.ContentLength <= 0 || req.GetBody == nil) || len(req.TransferEncoding) > 0 || req.Close {
		return req.Write(w)
	}
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	_, _ = w.WriteString(req.Method)
	_ = w.WriteByte(' ')
	_, _ = w.WriteString(req.URL.RequestURI())
	_, _ = w.WriteString(" HTTP/1.1\r\nHost: ")
	_, _ = w.WriteString(host)
	_, _ = w.WriteString("\r\nUser-Agent: ")
	if ua := req.Header.Get("User-Agent"); ua != "" {
		_, _ = w.WriteString(ua)
	} else {
		_, _ = w.WriteString("Go-http-client/1.1")
	}
	if req.Body != nil || req.Method == http.MethodPost || req.Method == http.MethodPut || req.Method == http.MethodPatch {
		_, _ = w.WriteString("\r\nContent-Length: ")
		_, _ = w.WriteString(strconv.FormatInt(req.ContentLength, 10))
	}
	for name, values := range req.Header {
		if name == "User-Agent" || name == "Host" || name == "Content-Length" {
			continue
		}
		for _, v := range values {
			if strings.ContainsAny(v, "\r\n") {
				return fmt.Errorf("header %s: value with a line break", name)
			}
			_, _ = w.WriteString("\r\n")
			_, _ = w.WriteString(name)
			_, _ = w.WriteString(": ")
			_, _ = w.WriteString(v)
		}
	}
	_, _ = w.WriteString("\r\n\r\n")
	if req.Body == nil {
		return nil
	}
	n, err := io.Copy(w, req.Body)
	_ = req.Body.Close()
	if err == nil && n != req.ContentLength {
		err = fmt.Errorf("request body: %d bytes, Content-Length %d", n, req.ContentLength)
	}
	return err
}

// readResponse reads the answer to req with fasthttp's parser, which
// allocates nothing of its own (net/http's ReadResponse and the body's
// io.ReadAll allocate per answer, on the machine Dispatch is measured
// on), and returns it as net/http's type, body read in full.
func readResponse(r *bufio.Reader, req *http.Request) (*http.Response, error) {
	fres := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(fres)
	fres.SkipBody = req.Method == http.MethodHead
	if err := fres.Read(r); err != nil {
		return nil, err
	}
	h := &fres.Header
	header := make(http.Header, h.Len())
	for name, value := range h.All() {
		header.Add(string(name), string(value))
	}
	body := bytes.Clone(fres.Body())
	code := fres.StatusCode()
	return &http.Response{
		Status:        strconv.Itoa(code) + " " + http.StatusText(code),
		StatusCode:    code,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        header,
		Body:          &answerBody{Reader: bytes.NewReader(body), all: body},
		ContentLength: int64(len(body)),
		Close:         h.ConnectionClose(),
		Request:       req,
	}, nil
}

// answerBody is an answer's body, read in full: a reader over it that
// also hands the bytes over whole (readAnswer), sparing a copy.
type answerBody struct {
	*bytes.Reader
	all []byte
}

func (b *answerBody) Close() error { return nil }

// Bytes returns the whole body, however much of it was read.
func (b *answerBody) Bytes() []byte { return b.all }

// ctxOr returns ctx's error when ctx ended (which is what broke the
// connection), err otherwise.
func ctxOr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

func (d *keepAliveDoer) get(ctx context.Context) (*doerConn, error) {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil, errors.New("client closed")
	}
	var stale []*doerConn
	for n := len(d.idle); n > 0; n = len(d.idle) {
		c := d.idle[n-1]
		d.idle = d.idle[:n-1]
		if time.Since(c.idleSince) < maxIdle {
			d.mu.Unlock()
			closeAll(stale)
			return c, nil
		}
		stale = append(stale, c)
	}
	d.mu.Unlock()
	closeAll(stale)
	conn, err := d.dialer.DialContext(ctx, "tcp", d.addr)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", d.addr, err)
	}
	return &doerConn{conn: conn, r: bufio.NewReader(conn), w: bufio.NewWriter(conn)}, nil
}

func (d *keepAliveDoer) put(c *doerConn) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		_ = c.conn.Close()
		return
	}
	c.idleSince = time.Now()
	d.idle = append(d.idle, c)
}

func closeAll(conns []*doerConn) {
	for _, c := range conns {
		_ = c.conn.Close()
	}
}

// Close closes the idle connections; connections in use close when their
// request ends.
func (d *keepAliveDoer) Close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	closeAll(d.idle)
	d.idle = nil
}
