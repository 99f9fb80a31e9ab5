package domain

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// OutcomeKind is what an attempt's result means for its delivery.
type OutcomeKind int

// Outcome kinds. The zero OutcomeKind is deliberately none of them, so a
// forgotten classification is never mistaken for a success.
const (
	// OutcomeSuccess: the endpoint accepted the webhook (2xx).
	OutcomeSuccess OutcomeKind = iota + 1
	// OutcomeRetryable: try again later, per the retry policy (408, 429, 5xx,
	// redirects, transport failures).
	OutcomeRetryable
	// OutcomePermanent: retrying cannot help (other 4xx, forbidden
	// destination); the delivery goes to the dead letters at once.
	OutcomePermanent
	// OutcomeGone: the endpoint answered 410 Gone. Permanent, and the
	// subscription is disabled with reason DisabledGone.
	OutcomeGone
)

// String returns the kind's metric label: success, retryable, permanent,
// gone.
func (k OutcomeKind) String() string {
	switch k {
	case OutcomeSuccess:
		return "success"
	case OutcomeRetryable:
		return "retryable"
	case OutcomePermanent:
		return "permanent"
	case OutcomeGone:
		return "gone"
	}
	return "OutcomeKind(" + strconv.Itoa(int(k)) + ")"
}

// Outcome is the classification of one attempt.
type Outcome struct {
	Kind OutcomeKind
	// RetryAfter is the endpoint's Retry-After as a delay from the response
	// (0 when absent, unparsable, in the past, or the outcome is not
	// retryable). The retry policy caps it.
	RetryAfter time.Duration
	// Reason is a short human text for the attempt record and logs, such
	// as "HTTP 503" or "redirect not followed (HTTP 302)".
	Reason string
}

// maxReasonLen bounds a Reason taken from an error's text: wrapped network
// errors can carry long URLs and chains, and Reason is for humans.
const maxReasonLen = 256

// maxRetryAfter clamps an endpoint's Retry-After: no retry policy waits
// longer than MaxRetryInterval, and clamping keeps absurd values from
// overflowing time.Duration.
const maxRetryAfter = MaxRetryInterval

// ClassifyResponse classifies an HTTP answer (SPEC §3): 2xx success; 408,
// 429 and 5xx retryable; 3xx a retryable failure, because redirects are not
// followed (a receiver that moved should update its subscription, and
// following them would let a receiver aim Dispatch's signed POSTs
// elsewhere); 410 gone; every other 4xx permanent. Codes outside 200..599
// (1xx, which net/http does not surface as final, and nonsense) are
// retryable: an endpoint speaking broken HTTP may be fixed. retryAfter, the
// raw Retry-After header, is read only for retryable outcomes, relative to
// now.
func ClassifyResponse(statusCode int, retryAfter string, now time.Time) Outcome {
	var o Outcome
	switch {
	case statusCode >= 200 && statusCode <= 299:
		return Outcome{Kind: OutcomeSuccess, Reason: httpReason(statusCode)}
	case statusCode == 410:
		return Outcome{Kind: OutcomeGone, Reason: "HTTP 410 Gone"}
	case statusCode == 408 || statusCode == 429 || statusCode >= 500 && statusCode <= 599:
		o = Outcome{Kind: OutcomeRetryable, Reason: httpReason(statusCode)}
	case statusCode >= 400 && statusCode <= 499:
		return Outcome{Kind: OutcomePermanent, Reason: httpReason(statusCode) + " is permanent"}
	case statusCode >= 300 && statusCode <= 399:
		o = Outcome{Kind: OutcomeRetryable, Reason: "redirect not followed (" + httpReason(statusCode) + ")"}
	default:
		o = Outcome{Kind: OutcomeRetryable, Reason: "unexpected " + httpReason(statusCode)}
	}
	o.RetryAfter = retryAfterDelay(retryAfter, now)
	return o
}

func httpReason(code int) string { return "HTTP " + strconv.Itoa(code) }

// ClassifyError classifies a failure to get an HTTP answer at all. An
// address refused by the SSRF guard (ErrForbiddenDestination) is permanent:
// it will be refused again. Everything else (timeouts, refused connections,
// TLS and DNS failures) is retryable, since endpoints come back. Reason is
// the error's text, shortened to 256 bytes.
func ClassifyError(err error) Outcome {
	if err == nil {
		// A caller bug; retrying is the harmless reading.
		return Outcome{Kind: OutcomeRetryable, Reason: "unknown transport error"}
	}
	kind := OutcomeRetryable
	if errors.Is(err, ErrForbiddenDestination) {
		kind = OutcomePermanent
	}
	return Outcome{Kind: kind, Reason: shorten(err.Error(), maxReasonLen)}
}

// shorten cuts s to at most n bytes on a rune boundary, marking the cut.
func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "…"
	cut := n - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}

// httpDateLayouts are the three forms RFC 9110 §5.6.7 requires recipients
// to accept, in the order net/http's ParseTime tries them. They are spelled
// out here to keep net/http out of the domain.
var httpDateLayouts = [...]string{
	"Mon, 02 Jan 2006 15:04:05 GMT", // IMF-fixdate (http.TimeFormat)
	time.RFC850,
	time.ANSIC,
}

// retryAfterDelay reads a Retry-After value (RFC 9110 §10.2.3) as a delay
// from now: delta-seconds (digits only) or an HTTP-date. Anything else, and
// dates in the past, give 0, meaning "no preference": a malformed header
// must not stall or speed up retries. The result is clamped to
// maxRetryAfter.
func retryAfterDelay(value string, now time.Time) time.Duration {
	value = strings.TrimSpace(value)
	if value == "" {
		return 0
	}
	if isDigits(value) {
		secs, err := strconv.ParseUint(value, 10, 64)
		if err != nil || secs > uint64(maxRetryAfter/time.Second) {
			// Only overflow fails here: the value is all digits.
			return maxRetryAfter
		}
		return time.Duration(secs) * time.Second
	}
	for _, layout := range httpDateLayouts {
		if t, err := time.Parse(layout, value); err == nil {
			return min(max(t.Sub(now), 0), maxRetryAfter)
		}
	}
	return 0
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// String makes an Outcome readable in test failures and logs.
func (o Outcome) String() string {
	if o.RetryAfter > 0 {
		return fmt.Sprintf("%s: %s (retry after %s)", o.Kind, o.Reason, o.RetryAfter)
	}
	return fmt.Sprintf("%s: %s", o.Kind, o.Reason)
}
