package httpapi

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime/multipart"
	"net/http"
	"net/url"
	"strings"
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
// registers for the publish operation, and the bounds New set.
type capturingAdapter struct {
	huma.Adapter
	publishOp *huma.Operation
	publish   func(huma.Context)
	bounds    *bounds
}

func (a *capturingAdapter) Handle(op *huma.Operation, handler func(huma.Context)) {
	if op.OperationID == publishOperation {
		a.publishOp, a.publish = op, handler
	}
	a.Adapter.Handle(op, handler)
}

// NewServer returns a fasthttp server for api, which New returned, with
// fallback the mux New registered api on (and whatever else it serves).
// Every body is streamed to the handler, at most 8 KiB of it read before
// (fasthttp's prefetch), so that the key and the limits are checked
// before the rest is read. A multipart body is never parsed.
func NewServer(api huma.API, fallback http.Handler, log *slog.Logger) *fasthttp.Server {
	captured, _ := api.Adapter().(*capturingAdapter)
	limit := DefaultMaxEventBytes
	if captured != nil && captured.publishOp != nil && captured.publishOp.MaxBodyBytes > 0 {
		limit = int(captured.publishOp.MaxBodyBytes)
	}
	return &fasthttp.Server{
		Handler:            fastHandler(api, captured, fallback, log),
		ReadTimeout:        10 * time.Second,
		IdleTimeout:        2 * time.Minute,
		ReadBufferSize:     maxHeaderBytes,
		MaxRequestBodySize: limit + 1,
		StreamRequestBody:  true,
		// Otherwise fasthttp reads a multipart body of any length before
		// the handler runs, spooling its files to $TMPDIR.
		DisablePreParseMultipartForm: true,
		NoDefaultServerHeader:        true,
		Logger:                       serverLog{log},
	}
}

// serverLog sends what fasthttp's server reports (a connection it could
// not serve) to the log.
type serverLog struct{ log *slog.Logger }

func (l serverLog) Printf(format string, args ...any) {
	l.log.Warn("HTTP server: " + fmt.Sprintf(format, args...))
}

// fastHandler serves the publishes a captured natively and everything
// else through fallback, each once its header has passed the bounds, and
// logs it.
func fastHandler(api huma.API, a *capturingAdapter, fallback http.Handler, log *slog.Logger) fasthttp.RequestHandler {
	slow := fasthttpadaptor.NewFastHTTPHandler(routeFromPattern(fallback))
	if a == nil || a.bounds == nil {
		return slow
	}
	b := a.bounds
	publishPath := ""
	if a.publish != nil {
		publishPath = a.publishOp.Path
	}
	return func(ctx *fasthttp.RequestCtx) {
		fc := &fastContext{ctx: ctx}
		fc.rec = requestRecord{start: time.Now(), id: requestID(ctx.Request.Header.Peek(requestIDHeader))}
		fc.rctx = requestContext{Context: context.Background(), rec: &fc.rec}
		ctx.Response.Header.Set(requestIDHeader, fc.rec.id)
		publish := publishPath != "" && ctx.IsPost() && string(ctx.Path()) == publishPath
		if publish {
			fc.op = a.publishOp
		}
		refused := b.admit(ctx.Path(), publish, int64(ctx.Request.Header.ContentLength()),
			ctx.Request.Header.Peek("Authorization"), &fc.rec)
		if refused == admitted && !publish && !cutBody(ctx, b.maxBody) {
			refused = refusedSize
		}
		if refused != admitted {
			// The rest of the body is not read: the connection ends with the
			// answer.
			ctx.SetConnectionClose()
			fc.rec.route = publishPath
			if !publish {
				// The answer is written as huma writes it, for no operation.
				fc.op = &huma.Operation{Method: string(ctx.Method()), Path: string(ctx.Path())}
				fc.rec.route = routeOf(fallback, fc.op.Method, fc.op.Path)
			}
		}
		switch {
		case refused == refusedKey:
			refuseKey(api, fc)
		case refused == refusedSize:
			_ = huma.WriteErr(api, fc, http.StatusRequestEntityTooLarge,
				fmt.Sprintf("request body is too large limit=%d bytes", b.limit(publish)))
		case publish:
			a.publish(fc)
		default:
			ctx.Request.Header.Set(requestIDHeader, fc.rec.id)
			ctx.SetUserValue(recordKey{}, &fc.rec)
			slow(ctx)
		}
		accessLog(log, methodName(ctx.Method()), ctx.Response.StatusCode(), &fc.rec)
	}
}

// cutBody reads a streamed body of a request fasthttpadaptor will serve,
// which reads a body whole before the handler runs, up to limit: ok is
// false when the body is longer.
func cutBody(ctx *fasthttp.RequestCtx, limit int64) (ok bool) {
	if cl := ctx.Request.Header.ContentLength(); !ctx.Request.IsBodyStream() || cl == 0 || cl < -1 {
		return true // no body
	}
	body, err := readBody(io.LimitReader(ctx.RequestBodyStream(), limit+1), 0, string(ctx.Request.Header.Peek("Content-Length")))
	if err != nil || int64(len(body)) > limit {
		return false
	}
	ctx.Request.SetBodyRaw(body)
	return true
}

// routeOf names the route fallback would have served a request by, when
// it is a ServeMux.
func routeOf(fallback http.Handler, method, path string) string {
	mux, ok := fallback.(*http.ServeMux)
	if !ok {
		return ""
	}
	_, pattern := mux.Handler(&http.Request{Method: method, URL: &url.URL{Path: path}})
	_, route, _ := strings.Cut(pattern, " ")
	return route
}

// routeFromPattern names the route of a request that no huma operation
// served (/metrics, the OpenAPI document) after the pattern the mux
// matched.
func routeFromPattern(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r)
		if rec := recordOf(r.Context()); rec != nil && rec.route == "" && r.Pattern != "" {
			_, path, _ := strings.Cut(r.Pattern, " ")
			rec.route = path
		}
	})
}

// requestContext is the context of a request served natively: not tied
// to the connection, since fasthttp does not watch for a client going
// away and a publish under way finishes either way (its deadline comes
// from requestScope), carrying the request's record.
type requestContext struct {
	context.Context
	rec *requestRecord
}

func (c *requestContext) Value(key any) any {
	if key == (recordKey{}) {
		return c.rec
	}
	return c.Context.Value(key)
}

// fastContext is huma.Context on a fasthttp request.
type fastContext struct {
	op     *huma.Operation
	ctx    *fasthttp.RequestCtx
	status int
	rec    requestRecord
	rctx   requestContext
}

var _ huma.Context = (*fastContext)(nil)

func (c *fastContext) Operation() *huma.Operation { return c.op }

func (c *fastContext) Context() context.Context { return &c.rctx }

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

// GetMultipartForm refuses: no operation takes a multipart body, and
// parsing one would spool its files to disk.
func (c *fastContext) GetMultipartForm() (*multipart.Form, error) { return nil, errNoMultipart }

var errNoMultipart = errors.New("multipart bodies are not accepted")

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
