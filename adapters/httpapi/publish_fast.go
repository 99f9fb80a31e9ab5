package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/danielgtaylor/huma/v2"

	"github.com/dispatch-webhooks/dispatch/domain"
)

// Publishing is the hot path of the API, and huma's generic request handling
// costs several passes over each body: it decodes it into map[string]any to
// validate it against the schema, decodes it again into PublishBody (which
// validates the JSON again and skips data once more), and encodes the answer
// through reflection, compacting the echoed data once more.
//
// The fast path below serves the common request without that: it reads the
// body once, accepts it only when huma would accept it with exactly the same
// values (well-formed JSON, exactly the known fields, strings without
// escapes, lengths within the schema's limits, data an object of valid JSON),
// and writes the answer huma would write. Whenever it is not certain — an
// escape, an unknown field, a number with an exponent, an odd header, a
// failed read, a body at the size limit — it hands the request, body
// included, to huma's own path. So it never decides that a request is
// invalid; every error answer still comes from huma, and the contract
// (status codes, problem+json details, the OpenAPI document) is huma's.
// publish_fast_test.go checks the two paths answer alike.

// maxFastHeader is the longest idempotency key header the fast path takes:
// a value of at most this many bytes has at most this many characters, so it
// passes the schema's maxLength.
const maxFastHeader = 256

// maxFastDepth bounds the nesting of data the fast path checks; deeper data
// goes through huma (encoding/json's own limit is 10,000).
const maxFastDepth = 64

// fastPublishMiddlewares returns the middleware that serves publishes on the
// fast path, or none when it is turned off.
func (h *handlers) fastPublishMiddlewares(api huma.API) huma.Middlewares {
	if h.slowPublish {
		return nil
	}
	return huma.Middlewares{func(ctx huma.Context, next func(huma.Context)) {
		h.fastPublish(api, ctx, next)
	}}
}

func (h *handlers) fastPublish(api huma.API, ctx huma.Context, next func(huma.Context)) {
	key, xKey := ctx.Header("Idempotency-Key"), ctx.Header("X-Idempotency-Key")
	if len(key) > maxFastHeader || len(xKey) > maxFastHeader || ctx.Header("Content-Type") != "application/json" {
		next(ctx)
		return
	}
	if ct, err := api.Negotiate(ctx.Header("Accept")); err != nil || ct != "application/json" {
		next(ctx)
		return
	}

	// Read the body as huma would: same deadline, same limit.
	op := ctx.Operation()
	if op.BodyReadTimeout > 0 {
		_ = ctx.SetReadDeadline(time.Now().Add(op.BodyReadTimeout))
	} else if op.BodyReadTimeout < 0 {
		_ = ctx.SetReadDeadline(time.Time{})
	}
	reader := ctx.BodyReader()
	if reader == nil {
		reader = bytes.NewReader(nil)
	}
	body, err := readBody(reader, op.MaxBodyBytes, ctx.Header("Content-Length"))
	if err != nil || (op.MaxBodyBytes > 0 && int64(len(body)) == op.MaxBodyBytes) {
		// huma reads the same bytes again, then the rest or the error, and
		// answers 413 or whatever the error calls for.
		rest := reader
		if err != nil {
			rest = failingReader{err}
		}
		next(replayContext{ctx, io.MultiReader(bytes.NewReader(body), rest)})
		return
	}
	in, ok := parsePublish(body)
	if !ok {
		next(replayContext{ctx, bytes.NewReader(body)})
		return
	}

	// parsePublish checked data as encoding/json's scanner does.
	out, err := h.publish(ctx.Context(), in, true, key, xKey)
	if err != nil {
		writeHandlerError(api, ctx, err)
		return
	}
	writePublished(api, ctx, out)
}

// replayContext hands huma a body the fast path has already read.
type replayContext struct {
	humaContext
	body io.Reader
}

// humaContext lets replayContext embed huma.Context, whose Context method
// would clash with a field of that name.
type humaContext = huma.Context

func (c replayContext) BodyReader() io.Reader { return c.body }

// failingReader replays a read error.
type failingReader struct{ err error }

func (r failingReader) Read([]byte) (int, error) { return 0, r.err }

// readBody reads at most limit bytes (when limit > 0) into a new slice, sized
// from the Content-Length header when there is one. The slice is the
// request's own: parsePublish's data aliases it.
func readBody(r io.Reader, limit int64, contentLength string) ([]byte, error) {
	size := 512
	if n, err := strconv.Atoi(contentLength); err == nil && n >= 0 {
		size = n + 1 // room to see EOF without growing
	}
	if limit > 0 {
		if int64(size) > limit {
			size = int(limit)
		}
		r = io.LimitReader(r, limit)
	}
	b := make([]byte, 0, size)
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}

// writeHandlerError answers err as huma answers an error a handler returns.
func writeHandlerError(api huma.API, ctx huma.Context, err error) {
	var he huma.HeadersError
	if errors.As(err, &he) {
		for k, values := range he.GetHeaders() {
			for _, v := range values {
				ctx.AppendHeader(k, v)
			}
		}
	}
	var se huma.StatusError
	if !errors.As(err, &se) {
		se = huma.NewErrorWithContext(ctx, http.StatusInternalServerError, "unexpected error occurred", err)
	}
	ct, _ := api.Negotiate(ctx.Header("Accept")) // succeeded before the handler ran
	if ctf, ok := se.(huma.ContentTypeFilter); ok {
		ct = ctf.ContentType(ct)
	}
	ctx.SetHeader("Content-Type", ct)
	tVal, err := api.Transform(ctx, strconv.Itoa(se.GetStatus()), se)
	if err != nil {
		_, _ = ctx.BodyWriter().Write([]byte("error transforming response"))
		panic(fmt.Errorf("error transforming response for %s %s %d: %w", ctx.Operation().Method, ctx.Operation().Path, se.GetStatus(), err))
	}
	ctx.SetStatus(se.GetStatus())
	marshal(api, ctx, se.GetStatus(), ct, tVal)
}

// marshal writes v as huma does, for what the fast encoder does not handle.
func marshal(api huma.API, ctx huma.Context, status int, ct string, v any) {
	if err := api.Marshal(ctx.BodyWriter(), ct, v); err != nil {
		if errors.Is(ctx.Context().Err(), context.Canceled) {
			ctx.SetStatus(499)
			return
		}
		_, _ = ctx.BodyWriter().Write([]byte("error marshaling response"))
		panic(fmt.Errorf("error marshaling response for %s %s %d: %w", ctx.Operation().Method, ctx.Operation().Path, status, err))
	}
}

var eventBufs = sync.Pool{New: func() any { b := make([]byte, 0, 2048); return &b }}

// writePublished answers out as huma does: the Idempotent-Replayed header,
// the content type, the schema link (huma's transformer), then the event,
// encoded as encoding/json encodes it.
func writePublished(api huma.API, ctx huma.Context, out *publishOutput) {
	if out.Replayed != "" {
		ctx.SetHeader("Idempotent-Replayed", out.Replayed)
	}
	ctx.SetHeader("Content-Type", "application/json")
	tVal, err := api.Transform(ctx, strconv.Itoa(out.Status), out.Body)
	if err != nil {
		_, _ = ctx.BodyWriter().Write([]byte("error transforming response"))
		panic(fmt.Errorf("error transforming response for %s %s %d: %w", ctx.Operation().Method, ctx.Operation().Path, out.Status, err))
	}
	ctx.SetStatus(out.Status)
	bp := eventBufs.Get().(*[]byte)
	if b, ok := appendEventJSON((*bp)[:0], tVal, &out.Body); ok {
		_, _ = ctx.BodyWriter().Write(b)
		if cap(b) <= 64<<10 {
			*bp = b[:0]
			eventBufs.Put(bp)
		}
		return
	}
	eventBufs.Put(bp)
	marshal(api, ctx, out.Status, "application/json", tVal)
}

var eventFields = reflect.TypeFor[Event]().NumField()

// appendEventJSON appends what huma's JSON format writes for tVal, the
// transformed ev: ev with a leading "$schema" when huma's schema link
// transformer added one. ok is false for what it does not handle, for
// huma's encoder to write instead.
func appendEventJSON(b []byte, tVal any, ev *Event) (_ []byte, ok bool) {
	schema, hasSchema := "", false
	if _, plain := tVal.(Event); !plain {
		rv := reflect.Indirect(reflect.ValueOf(tVal))
		if rv.Kind() != reflect.Struct || rv.NumField() != eventFields+1 ||
			rv.Type().Field(0).Tag != `json:"$schema"` || rv.Field(0).Kind() != reflect.String {
			return b, false
		}
		schema, hasSchema = rv.Field(0).String(), true
	}
	if len(ev.Deliveries) > 0 {
		return b, false
	}
	b = append(b, '{')
	if hasSchema {
		b = append(b, `"$schema":`...)
		b = appendJSONString(b, schema)
		b = append(b, ',')
	}
	b = append(b, `"id":`...)
	b = appendJSONString(b, ev.ID)
	b = append(b, `,"type":`...)
	b = appendJSONString(b, ev.Type)
	b = append(b, `,"source":`...)
	b = appendJSONString(b, ev.Source)
	b = append(b, `,"data":`...)
	if b, ok = appendData(b, ev.Data); !ok {
		return b, false
	}
	b = append(b, `,"ordering_key":`...)
	if ev.OrderingKey == nil {
		b = append(b, "null"...)
	} else {
		b = appendJSONString(b, *ev.OrderingKey)
	}
	b = append(b, `,"status":`...)
	b = appendJSONString(b, ev.Status)
	b = append(b, `,"failure_reason":`...)
	if ev.FailureReason == nil {
		b = append(b, "null"...)
	} else {
		b = appendJSONString(b, *ev.FailureReason)
	}
	b = append(b, `,"created_at":`...)
	t, err := ev.CreatedAt.MarshalJSON()
	if err != nil {
		return b, false
	}
	b = append(b, t...)
	b = append(b, `,"deliveries":`...)
	if ev.Deliveries == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, "[]"...)
	}
	if ev.DeliveriesNextCursor != nil {
		return b, false // a publish's answer has no page of deliveries to follow
	}
	b = append(b, `,"deliveries_next_cursor":null`...)
	return append(b, "}\n"...), true
}

// appendJSONString appends s as encoding/json does without HTML escaping.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' {
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false)
			_ = enc.Encode(s) // a string always encodes
			return append(b, bytes.TrimSuffix(buf.Bytes(), []byte("\n"))...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// appendData appends d as encoding/json writes EventData: MarshalJSON's
// bytes, compacted.
func appendData(b []byte, d EventData) ([]byte, bool) {
	raw, _ := d.MarshalJSON() // never fails
	if domain.IsCompactJSON(raw) {
		return append(b, raw...), true
	}
	buf := bytes.NewBuffer(b)
	if err := json.Compact(buf, raw); err != nil {
		return b, false
	}
	return buf.Bytes(), true
}

// parsePublish decodes a publish body when huma would accept it and decode
// it into exactly these values; ok false means "not certain", never
// "invalid".
func parsePublish(b []byte) (in PublishBody, ok bool) {
	const (
		sawType = 1 << iota
		sawSource
		sawData
		sawOrderingKey
	)
	var seen int
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return in, false
	}
	i = skipSpace(b, i+1)
	for {
		key, end, ok := plainString(b, i)
		if !ok {
			return in, false
		}
		i = skipSpace(b, end)
		if i >= len(b) || b[i] != ':' {
			return in, false
		}
		i = skipSpace(b, i+1)
		var field int
		switch string(key) {
		case "type":
			field = sawType
			var s []byte
			if s, end, ok = plainString(b, i); !ok || !utf8.Valid(s) {
				return in, false
			}
			if n := utf8.RuneCount(s); n < 1 || n > 128 {
				return in, false
			}
			in.Type = string(s)
		case "source":
			field = sawSource
			var s []byte
			if s, end, ok = plainString(b, i); !ok || !utf8.Valid(s) || utf8.RuneCount(s) > 256 {
				return in, false
			}
			in.Source = string(s)
		case "ordering_key":
			field = sawOrderingKey
			var s []byte
			if s, end, ok = plainString(b, i); !ok || !utf8.Valid(s) || utf8.RuneCount(s) > 256 {
				return in, false
			}
			in.OrderingKey = string(s)
		case "data":
			field = sawData
			if i >= len(b) || b[i] != '{' {
				return in, false
			}
			if end, ok = skipValue(b, i, 0); !ok {
				return in, false
			}
			in.Data = EventData(b[i:end:end])
		default:
			return in, false
		}
		if seen&field != 0 {
			return in, false // a repeated field: the last one wins, in huma's way
		}
		seen |= field
		i = skipSpace(b, end)
		if i >= len(b) {
			return in, false
		}
		if b[i] == '}' {
			i++
			break
		}
		if b[i] != ',' {
			return in, false
		}
		i = skipSpace(b, i+1)
	}
	if skipSpace(b, i) != len(b) || seen&(sawType|sawSource|sawData) != sawType|sawSource|sawData {
		return in, false
	}
	return in, true
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// plainString returns the content of the string starting at b[i] when it has
// no escape sequences, and the index after its closing quote.
func plainString(b []byte, i int) (s []byte, end int, ok bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, 0, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return b[i+1 : j], j + 1, true
		case c == '\\' || c < 0x20:
			return nil, 0, false
		}
	}
	return nil, 0, false
}

// skipValue returns the index after the JSON value starting at b[i] when it
// is one encoding/json decodes into an interface without error. Numbers with
// an exponent or of more than 300 characters are refused: they could
// overflow a float64, which encoding/json reports as an error.
func skipValue(b []byte, i, depth int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	switch c := b[i]; {
	case c == '{' || c == '[':
		if depth >= maxFastDepth {
			return 0, false
		}
		closing := byte('}')
		if c == '[' {
			closing = ']'
		}
		i = skipSpace(b, i+1)
		if i < len(b) && b[i] == closing {
			return i + 1, true
		}
		for {
			var ok bool
			if c == '{' {
				if i, ok = skipString(b, i); !ok {
					return 0, false
				}
				i = skipSpace(b, i)
				if i >= len(b) || b[i] != ':' {
					return 0, false
				}
				i = skipSpace(b, i+1)
			}
			if i, ok = skipValue(b, i, depth+1); !ok {
				return 0, false
			}
			i = skipSpace(b, i)
			if i >= len(b) {
				return 0, false
			}
			if b[i] == closing {
				return i + 1, true
			}
			if b[i] != ',' {
				return 0, false
			}
			i = skipSpace(b, i+1)
		}
	case c == '"':
		return skipString(b, i)
	case c == 't':
		return skipLiteral(b, i, "true")
	case c == 'f':
		return skipLiteral(b, i, "false")
	case c == 'n':
		return skipLiteral(b, i, "null")
	case c == '-' || ('0' <= c && c <= '9'):
		return skipNumber(b, i)
	}
	return 0, false
}

func skipLiteral(b []byte, i int, lit string) (int, bool) {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return 0, false
	}
	return i + len(lit), true
}

// skipString checks the string starting at b[i] as encoding/json's scanner
// does: no control characters, only valid escapes; any other byte passes.
func skipString(b []byte, i int) (int, bool) {
	if i >= len(b) || b[i] != '"' {
		return 0, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return j + 1, true
		case c < 0x20:
			return 0, false
		case c == '\\':
			j++
			if j >= len(b) {
				return 0, false
			}
			switch b[j] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if len(b)-j < 5 {
					return 0, false
				}
				for _, h := range b[j+1 : j+5] {
					if (h < '0' || h > '9') && (h < 'a' || h > 'f') && (h < 'A' || h > 'F') {
						return 0, false
					}
				}
				j += 4
			default:
				return 0, false
			}
		}
	}
	return 0, false
}

// skipNumber checks -?(0|[1-9][0-9]*)(\.[0-9]+)? and refuses exponents.
func skipNumber(b []byte, i int) (int, bool) {
	start := i
	if b[i] == '-' {
		i++
	}
	digits := func() int {
		n := 0
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
			n++
		}
		return n
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case digits() == 0:
		return 0, false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if digits() == 0 {
			return 0, false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') || i-start > 300 {
		return 0, false
	}
	return i, true
}
