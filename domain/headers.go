package domain

import (
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// Limits on a subscription's custom headers (SPEC §4). Every webhook
// carries them, so they are kept well inside what servers accept of a
// request's head (commonly 8 to 16 KiB in all).
const (
	// MaxHeaders is the most custom headers a subscription may set.
	MaxHeaders = 20
	// MaxHeadersBytes bounds the custom headers' names and values together.
	MaxHeadersBytes = 8 << 10
	// maxHeaderNameLen bounds one name, so an error can quote it.
	maxHeaderNameLen = 256
)

// reservedHeaders are set by Dispatch on every request; a subscription may
// not override them.
var reservedHeaders = map[string]bool{
	"content-type": true, "content-length": true, "user-agent": true, "host": true,
	"webhook-id": true, "webhook-timestamp": true, "webhook-signature": true,
}

// hopByHopHeaders govern one connection, not the message (RFC 9110 §7.6.1,
// RFC 9112 §9.6, and the Proxy- and Keep-Alive headers of RFC 2068 that
// proxies still honour). Set by a subscription they would change how
// Dispatch's client or a proxy in between handles the connection, or be
// dropped on the way.
var hopByHopHeaders = map[string]bool{
	"connection": true, "keep-alive": true, "proxy-connection": true, "proxy-authenticate": true,
	"proxy-authorization": true, "te": true, "trailer": true, "transfer-encoding": true, "upgrade": true,
}

// ValidateHeaders checks a subscription's custom headers: at most
// MaxHeaders of them and MaxHeadersBytes of names and values in all; each
// name an RFC 9110 token, neither set by Dispatch nor hop-by-hop, and
// distinct from the others ignoring case; each value an RFC 9110
// field-value: visible characters (non-ASCII as UTF-8, for obs-text),
// with spaces and tabs only between them. A refusal names the header
// (field headers.<name> once the name is a token) and never quotes a
// value, which may be a credential or huge.
func ValidateHeaders(headers map[string]string) error {
	if len(headers) > MaxHeaders {
		return invalid("headers", "must have at most %d entries, got %d", MaxHeaders, len(headers))
	}
	total := 0
	for name, value := range headers {
		total += len(name) + len(value)
	}
	if total > MaxHeadersBytes {
		return invalid("headers", "names and values must total at most %d bytes, got %d", MaxHeadersBytes, total)
	}
	names := make([]string, 0, len(headers))
	for name := range headers {
		names = append(names, name)
	}
	slices.Sort(names) // the same input gets the same error
	seen := make(map[string]string, len(names))
	for _, name := range names {
		if !validHeaderName(name) {
			return invalid("headers", "%q is not a valid header name: it must be 1 to %d letters, digits or !#$%%&'*+-.^_`|~ (an RFC 9110 token)",
				shortened(name), maxHeaderNameLen)
		}
		field := "headers." + name
		lower := strings.ToLower(name)
		switch {
		case reservedHeaders[lower]:
			return invalid(field, "%s is set by Dispatch and cannot be overridden", name)
		case hopByHopHeaders[lower]:
			return invalid(field, "%s is a hop-by-hop header: it governs a single connection and cannot be set for an endpoint", name)
		case seen[lower] != "":
			return invalid(field, "%s names the same header as %s (header names ignore case)", name, seen[lower])
		}
		seen[lower] = name
		if problem := fieldValueProblem(headers[name]); problem != "" {
			return invalid(field, "value %s", problem)
		}
	}
	return nil
}

// validHeaderName reports whether name is an RFC 9110 token of at most
// maxHeaderNameLen bytes.
func validHeaderName(name string) bool {
	if name == "" || len(name) > maxHeaderNameLen {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && strings.IndexByte("!#$%&'*+-.^_`|~", c) < 0 {
			return false
		}
	}
	return true
}

// fieldValueProblem says what keeps v from being an RFC 9110 field-value
// (§5.5: field-vchar = VCHAR / obs-text, SP and HTAB only between them),
// or returns "" when nothing does. obs-text is accepted as UTF-8, the
// only encoding a JSON string carries.
func fieldValueProblem(v string) string {
	if !utf8.ValidString(v) {
		return "is not valid UTF-8"
	}
	if v != strings.Trim(v, " \t") {
		return "must not start or end with a space or tab"
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 && c != '\t' || c == 0x7f {
			return fmt.Sprintf("must not contain the control character 0x%02X (at byte %d)", c, i)
		}
	}
	return ""
}

// shortened cuts s for quoting in an error message.
func shortened(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
