package httpapi

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"mime/multipart"
	"net/http"
	"net/url"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"
)

// Publishing is most of what the API serves, and net/http's server costs a
// publish about as much as the handler does: a goroutine reading in the
// background and its deadline moved twice per request, the request's and
// the response's header maps. NewServer serves the API on fasthttp
// instead: publishes natively, through the very handler chain huma built
// for the operation (the key check, the fast path, huma's own path), on a
// huma.Context over fasthttp's request, so only the transport differs;
// every other request through the net/http handler the operations were
// registered on, converted by fasthttpadaptor. fasthttp_test.go holds the
// two transports to the same answers.

// publishOperation is the operation the server serves natively.
const publishOperation = "publish-event"

// maxHeaderBytes bounds a request's line and headers together (fasthttp's
// read buffer); longer ones are answered 431.
const maxHeaderBytes = 8 << 10

// capturingAdapter is humago's adapter, also keeping the handler chain huma
// registers for the publish operation.
type capturingAdapter struct {
	huma.Adapter
	publishOp *huma.Operation
	publish   func(huma.Context)
}

func (a *capturingAdapter) Handle(op *huma.Operation, handler func(huma.Context)) {
	if op.OperationID == publishOperation {
		a.publishOp, a.publish = op, handler
	}
	a.Adapter.Handle(op, handler)
}

// NewServer returns a fasthttp server for api, which New returned, with
// fallback the mux New registered api on (and whatever else it serves).
// Bodies up to the publish limit are read before the handler runs; longer
// ones are streamed to it, so that huma's own limits answer them.
func NewServer(api huma.API, fallback http.Handler, log *slog.Logger) *fasthttp.Server {
	captured, _ := api.Adapter().(*capturingAdapter)
	limit := DefaultMaxEventBytes
	if captured != nil && captured.publishOp != nil && captured.publishOp.MaxBodyBytes > 0 {
		limit = int(captured.publishOp.MaxBodyBytes)
	}
	return &fasthttp.Server{
		Handler:               fastHandler(captured, fallback),
		ReadTimeout:           10 * time.Second,
		IdleTimeout:           2 * time.Minute,
		ReadBufferSize:        maxHeaderBytes,
		MaxRequestBodySize:    limit + 1,
		StreamRequestBody:     true,
		NoDefaultServerHeader: true,
		Logger:                serverLog{log},
	}
}

// serverLog sends what fasthttp's server reports (a connection it could
// not serve) to the log.
type serverLog struct{ log *slog.Logger }

func (l serverLog) Printf(format string, args ...any) {
	l.log.Warn("HTTP server: " + fmt.Sprintf(format, args...))
}

// fastHandler serves the publishes a captured natively and everything
// else through fallback.
func fastHandler(a *capturingAdapter, fallback http.Handler) fasthttp.RequestHandler {
	slow := fasthttpadaptor.NewFastHTTPHandler(fallback)
	if a == nil || a.publish == nil {
		return slow
	}
	path := a.publishOp.Path
	return func(ctx *fasthttp.RequestCtx) {
		if ctx.IsPost() && string(ctx.Path()) == path {
			a.publish(&fastContext{op: a.publishOp, ctx: ctx})
			return
		}
		slow(ctx)
	}
}

// fastContext is huma.Context on a fasthttp request.
type fastContext struct {
	op     *huma.Operation
	ctx    *fasthttp.RequestCtx
	status int
}

var _ huma.Context = (*fastContext)(nil)

func (c *fastContext) Operation() *huma.Operation { return c.op }

// Context is not tied to the connection: fasthttp does not watch for a
// client going away, and a publish under way finishes either way.
func (c *fastContext) Context() context.Context { return context.Background() }

func (c *fastContext) TLS() *tls.ConnectionState { return c.ctx.TLSConnectionState() }

func (c *fastContext) Version() huma.ProtoVersion {
	minor := 1
	if !c.ctx.Request.Header.IsHTTP11() {
		minor = 0
	}
	return huma.ProtoVersion{Proto: string(c.ctx.Request.Header.Protocol()), ProtoMajor: 1, ProtoMinor: minor}
}

func (c *fastContext) Method() string     { return string(c.ctx.Method()) }
func (c *fastContext) Host() string       { return string(c.ctx.Host()) }
func (c *fastContext) RemoteAddr() string { return c.ctx.RemoteAddr().String() }

func (c *fastContext) URL() url.URL {
	u, err := url.ParseRequestURI(string(c.ctx.RequestURI()))
	if err != nil {
		return url.URL{Path: string(c.ctx.Path())}
	}
	return *u
}

func (c *fastContext) Param(string) string { return "" }

func (c *fastContext) Query(name string) string { return string(c.ctx.QueryArgs().Peek(name)) }

func (c *fastContext) Header(name string) string { return string(c.ctx.Request.Header.Peek(name)) }

func (c *fastContext) EachHeader(cb func(name, value string)) {
	for k, v := range c.ctx.Request.Header.All() {
		cb(string(k), string(v))
	}
}

func (c *fastContext) BodyReader() io.Reader {
	if c.ctx.Request.IsBodyStream() {
		return c.ctx.RequestBodyStream()
	}
	return bytes.NewReader(c.ctx.Request.Body())
}

func (c *fastContext) GetMultipartForm() (*multipart.Form, error) { return c.ctx.MultipartForm() }

// SetReadDeadline bounds the reading of a streamed body; a body read
// before the handler ran is already in memory.
func (c *fastContext) SetReadDeadline(deadline time.Time) error {
	if !c.ctx.Request.IsBodyStream() {
		return nil
	}
	return c.ctx.Conn().SetReadDeadline(deadline)
}

func (c *fastContext) SetStatus(code int) {
	c.status = code
	c.ctx.SetStatusCode(code)
}

func (c *fastContext) Status() int { return c.status }

func (c *fastContext) SetHeader(name, value string) { c.ctx.Response.Header.Set(name, value) }

func (c *fastContext) AppendHeader(name, value string) { c.ctx.Response.Header.Add(name, value) }

func (c *fastContext) BodyWriter() io.Writer { return c.ctx }
