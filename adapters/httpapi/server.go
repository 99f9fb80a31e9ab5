package httpapi

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"
)

// NewServer serves the API on net/http's server: every operation as huma's
// humago adapter registered it on the mux New was given, behind bounds
// that a request passes on its header alone, before a byte of its body is
// read (the id, the key, the declared length), and one access-log line.

// maxHeaderBytes bounds a request's line and headers together; longer ones
// are answered 431.
const maxHeaderBytes = 8 << 10

// publishOperation, at publishPath, is the operation whose body has its own
// limit.
const (
	publishOperation = "publish-event"
	publishPath      = "/v1/events"
)

// boundedAdapter is humago's adapter, also carrying the bounds New set,
// for NewServer.
type boundedAdapter struct {
	huma.Adapter
	bounds *bounds
}

// NewServer returns a server for api, which New returned, with handler
// the mux New registered api on (and whatever else it serves).
func NewServer(api huma.API, handler http.Handler, log *slog.Logger) *http.Server {
	if a, ok := api.Adapter().(*boundedAdapter); ok {
		handler = bounded(api, a.bounds, handler, log)
	}
	return &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// bounded gives each request its id and record, answers those that fail
// the bounds without reading their body, serves the others through next,
// and logs each.
func bounded(api huma.API, b *bounds, next http.Handler, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &requestRecord{start: time.Now(), id: requestID([]byte(r.Header.Get(requestIDHeader)))}
		w.Header().Set(requestIDHeader, rec.id)
		sw := &statusWriter{ResponseWriter: w}
		// Not cancelled when the client goes away: a publish under way
		// finishes rather than stop halfway, within its deadline
		// (requestScope).
		r = r.WithContext(context.WithValue(context.WithoutCancel(r.Context()), recordKey{}, rec))
		publish := r.Method == http.MethodPost && r.URL.Path == publishPath
		refused := b.admit(r.URL.Path, publish, r.ContentLength, r.Header.Get("Authorization"), rec)
		if refused == admitted && r.ContentLength == -1 {
			refused = cutBody(sw, r, b.limit(publish), publish)
		}
		switch refused {
		case admitted:
			next.ServeHTTP(sw, r)
			if rec.route == "" && r.Pattern != "" {
				_, rec.route, _ = strings.Cut(r.Pattern, " ")
			}
		default:
			// The rest of the body is not read: the connection ends with
			// the answer.
			w.Header().Set("Connection", "close")
			rec.route = routeOf(next, r.Method, r.URL.Path)
			// The answer is written as huma writes it, for no operation.
			ctx := humago.NewContext(&huma.Operation{Method: r.Method, Path: r.URL.Path}, r, sw)
			if refused == refusedKey {
				refuseKey(api, ctx)
			} else {
				_ = huma.WriteErr(api, ctx, http.StatusRequestEntityTooLarge,
					fmt.Sprintf("request body is too large limit=%d bytes", b.limit(publish)))
			}
		}
		if sw.status == 0 {
			sw.status = http.StatusOK
		}
		accessLog(log, r.Method, sw.status, rec)
	})
}

// cutBody bounds a chunked body at limit. A publish's is read by huma,
// which refuses it at the limit; any other is read here, whole, since not
// every route reads its body, and refused when longer.
func cutBody(w http.ResponseWriter, r *http.Request, limit int64, publish bool) refusal {
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	if publish {
		return admitted
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return refusedSize
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	return admitted
}

// routeOf names the route handler would have served a request by, when it
// is a ServeMux.
func routeOf(handler http.Handler, method, path string) string {
	mux, ok := handler.(*http.ServeMux)
	if !ok {
		return ""
	}
	_, pattern := mux.Handler(&http.Request{Method: method, URL: &url.URL{Path: path}})
	_, route, _ := strings.Cut(pattern, " ")
	return route
}

// statusWriter keeps the status a handler answered, for the access log.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController (huma's read deadline) reach the
// connection.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
