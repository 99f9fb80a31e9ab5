package httpapi

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"
)

// What every API request gets: an id (X-Request-Id), a deadline that
// reaches PostgreSQL through its context, its key checked before its body
// is read, a bounded body, and one line in the access log.

// DefaultMaxBodyBytes bounds the body of every route but publish.
const DefaultMaxBodyBytes = 1 << 20

// DefaultRequestTimeout is the deadline of an API request.
const DefaultRequestTimeout = 30 * time.Second

// maxRequestIDLength bounds an X-Request-Id taken from a client.
const maxRequestIDLength = 128

// requestIDHeader names the request id in requests and answers.
const requestIDHeader = "X-Request-Id"

// requestRecord is what the access log says about a request; the layers
// it passes through fill it in.
type requestRecord struct {
	start time.Time
	id    string
	// route is the operation's path template; empty for a path no
	// operation serves.
	route string
	// keyID names the accepted key (keyring.check); empty when none.
	keyID string
}

type recordKey struct{}

// recordOf returns the record ctx carries, or nil.
func recordOf(ctx context.Context) *requestRecord {
	rec, _ := ctx.Value(recordKey{}).(*requestRecord)
	return rec
}

// requestID returns the id a client sent, when it is 1..128 visible ASCII
// characters, or a new one.
func requestID(sent []byte) string {
	if len(sent) == 0 || len(sent) > maxRequestIDLength {
		return newRequestID()
	}
	for _, c := range sent {
		if c < 0x21 || c > 0x7e {
			return newRequestID()
		}
	}
	return string(sent)
}

// newRequestID returns 128 random bits in hex. Ids need to be unique, not
// secret: math/rand/v2's generator costs no system call.
func newRequestID() string {
	var b [32]byte
	const digits = "0123456789abcdef"
	for half := range 2 {
		r := rand.Uint64()
		for i := range 16 {
			b[half*16+i] = digits[r&0xf]
			r >>= 4
		}
	}
	return string(b[:])
}

// accessLog writes the one line a request gets. Never a body, a header
// value or a key: the key's id only.
func accessLog(log *slog.Logger, method string, status int, rec *requestRecord) {
	log.LogAttrs(context.Background(), slog.LevelInfo, "request",
		slog.String("method", method),
		slog.String("route", rec.route),
		slog.Int("status", status),
		slog.Float64("duration_ms", float64(time.Since(rec.start).Microseconds())/1000),
		slog.String("request_id", rec.id),
		slog.String("key_id", rec.keyID),
	)
}

// requestLog is a log handler that adds the request's id to what is
// logged in a request's context.
type requestLog struct{ slog.Handler }

func (h requestLog) Handle(ctx context.Context, r slog.Record) error {
	if rec := recordOf(ctx); rec != nil {
		r.AddAttrs(slog.String("request_id", rec.id))
	}
	return h.Handler.Handle(ctx, r)
}

func (h requestLog) WithAttrs(attrs []slog.Attr) slog.Handler {
	return requestLog{h.Handler.WithAttrs(attrs)}
}

func (h requestLog) WithGroup(name string) slog.Handler { return requestLog{h.Handler.WithGroup(name)} }

// keyring holds the accepted API keys as SHA-256 digests, compared in
// constant time, so neither a key's content nor its length leaks through
// timing.
type keyring struct {
	digests [][32]byte
	// ids are the keys' ids: the first 8 hex digits of their digest, what
	// logs show instead of a key (`printf %s "$KEY" | sha256sum | cut -c1-8`).
	ids []string
}

func newKeyring(keys []string) keyring {
	k := keyring{digests: make([][32]byte, len(keys)), ids: make([]string, len(keys))}
	for i, key := range keys {
		k.digests[i] = sha256.Sum256([]byte(key))
		k.ids[i] = hex.EncodeToString(k.digests[i][:4])
	}
	return k
}

// check returns the id of the key an Authorization header carries, and
// whether it is one of the accepted keys.
func (k keyring) check(authorization string) (id string, ok bool) {
	token, ok := strings.CutPrefix(authorization, "Bearer ")
	if !ok || token == "" {
		return "", false
	}
	got := sha256.Sum256([]byte(token))
	match := -1
	for i, d := range k.digests {
		match = subtle.ConstantTimeSelect(subtle.ConstantTimeCompare(got[:], d[:]), i, match)
	}
	if match < 0 {
		return "", false
	}
	return k.ids[match], true
}

// needsKey tells whether a path is the API's, behind the key.
func needsKey(path string) bool { return strings.HasPrefix(path, "/v1/") }

// refuseKey answers a request without an accepted key.
func refuseKey(api huma.API, ctx huma.Context) {
	ctx.SetHeader("WWW-Authenticate", `Bearer realm="dispatch"`)
	_ = huma.WriteErr(api, ctx, http.StatusUnauthorized, "a valid API key is required: Authorization: Bearer <key>")
}

// requireKey answers 401 to /v1 requests without an accepted bearer key,
// before their body is read.
func requireKey(api huma.API, keys keyring) func(huma.Context, func(huma.Context)) {
	return func(ctx huma.Context, next func(huma.Context)) {
		if !needsKey(ctx.Operation().Path) {
			next(ctx)
			return
		}
		id, ok := keys.check(ctx.Header("Authorization"))
		if !ok {
			refuseKey(api, ctx)
			return
		}
		if rec := recordOf(ctx.Context()); rec != nil {
			rec.keyID = id
		}
		next(ctx)
	}
}

// requestScope names the request's route in its record and gives it its
// deadline: the context every use case, and so PostgreSQL, sees.
func requestScope(timeout time.Duration) func(huma.Context, func(huma.Context)) {
	return func(ctx huma.Context, next func(huma.Context)) {
		if rec := recordOf(ctx.Context()); rec != nil {
			rec.route = ctx.Operation().Path
		}
		c, cancel := context.WithTimeout(ctx.Context(), timeout)
		defer cancel()
		next(huma.WithContext(ctx, c))
	}
}

// bounds is what the server checks before it reads a byte of a body.
type bounds struct {
	keys keyring
	// maxBody bounds every body but a publish's, which maxEvent bounds.
	maxBody, maxEvent int64
}

// refusal is why a request is answered before its body is read.
type refusal int

const (
	admitted refusal = iota
	refusedKey
	refusedSize
)

// admit decides on a request from its header alone. contentLength is
// the declared length, -1 when the body is chunked, 0 when there is none.
// A /v1 request with a body needs its key first; then a declared length
// over the route's limit is refused. A chunked body is cut at the limit
// by whoever reads it.
func (b *bounds) admit(path string, publish bool, contentLength int64, authorization string, rec *requestRecord) refusal {
	if contentLength == 0 || contentLength < -1 {
		return admitted
	}
	over := contentLength > b.limit(publish)
	// A publish's key is checked by requireKey, before its body is read,
	// unless the body is refused here.
	if needsKey(path) && (!publish || over) {
		id, ok := b.keys.check(authorization)
		if !ok {
			return refusedKey
		}
		rec.keyID = id
	}
	if over {
		return refusedSize
	}
	return admitted
}

func (b *bounds) limit(publish bool) int64 {
	if publish {
		return b.maxEvent
	}
	return b.maxBody
}
