package domain_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/dispatch-webhooks/dispatch/domain"
)

var classifyNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func TestClassifyResponse(t *testing.T) {
	t.Parallel()
	const (
		success   = domain.OutcomeSuccess
		retryable = domain.OutcomeRetryable
		permanent = domain.OutcomePermanent
		gone      = domain.OutcomeGone
	)
	tests := []struct {
		status     int
		retryAfter string
		want       domain.Outcome
	}{
		{200, "", domain.Outcome{Kind: success, Reason: "HTTP 200"}},
		{201, "", domain.Outcome{Kind: success, Reason: "HTTP 201"}},
		{204, "", domain.Outcome{Kind: success, Reason: "HTTP 204"}},
		{299, "", domain.Outcome{Kind: success, Reason: "HTTP 299"}},
		{200, "120", domain.Outcome{Kind: success, Reason: "HTTP 200"}}, // Retry-After ignored

		{300, "", domain.Outcome{Kind: retryable, Reason: "redirect not followed (HTTP 300)"}},
		{301, "", domain.Outcome{Kind: retryable, Reason: "redirect not followed (HTTP 301)"}},
		{302, "", domain.Outcome{Kind: retryable, Reason: "redirect not followed (HTTP 302)"}},
		{304, "", domain.Outcome{Kind: retryable, Reason: "redirect not followed (HTTP 304)"}},
		{307, "", domain.Outcome{Kind: retryable, Reason: "redirect not followed (HTTP 307)"}},
		{308, "10", domain.Outcome{Kind: retryable, RetryAfter: 10 * time.Second, Reason: "redirect not followed (HTTP 308)"}},
		{399, "", domain.Outcome{Kind: retryable, Reason: "redirect not followed (HTTP 399)"}},

		{408, "", domain.Outcome{Kind: retryable, Reason: "HTTP 408"}},
		{429, "", domain.Outcome{Kind: retryable, Reason: "HTTP 429"}},
		{429, "120", domain.Outcome{Kind: retryable, RetryAfter: 2 * time.Minute, Reason: "HTTP 429"}},
		{500, "", domain.Outcome{Kind: retryable, Reason: "HTTP 500"}},
		{501, "", domain.Outcome{Kind: retryable, Reason: "HTTP 501"}},
		{502, "", domain.Outcome{Kind: retryable, Reason: "HTTP 502"}},
		{503, "30", domain.Outcome{Kind: retryable, RetryAfter: 30 * time.Second, Reason: "HTTP 503"}},
		{504, "", domain.Outcome{Kind: retryable, Reason: "HTTP 504"}},
		{599, "", domain.Outcome{Kind: retryable, Reason: "HTTP 599"}},

		{410, "", domain.Outcome{Kind: gone, Reason: "HTTP 410 Gone"}},
		{410, "120", domain.Outcome{Kind: gone, Reason: "HTTP 410 Gone"}},

		{400, "", domain.Outcome{Kind: permanent, Reason: "HTTP 400 is permanent"}},
		{400, "120", domain.Outcome{Kind: permanent, Reason: "HTTP 400 is permanent"}},
		{401, "", domain.Outcome{Kind: permanent, Reason: "HTTP 401 is permanent"}},
		{403, "", domain.Outcome{Kind: permanent, Reason: "HTTP 403 is permanent"}},
		{404, "", domain.Outcome{Kind: permanent, Reason: "HTTP 404 is permanent"}},
		{405, "", domain.Outcome{Kind: permanent, Reason: "HTTP 405 is permanent"}},
		{409, "", domain.Outcome{Kind: permanent, Reason: "HTTP 409 is permanent"}},
		{413, "", domain.Outcome{Kind: permanent, Reason: "HTTP 413 is permanent"}},
		{422, "", domain.Outcome{Kind: permanent, Reason: "HTTP 422 is permanent"}},
		{499, "", domain.Outcome{Kind: permanent, Reason: "HTTP 499 is permanent"}},

		{100, "", domain.Outcome{Kind: retryable, Reason: "unexpected HTTP 100"}},
		{101, "", domain.Outcome{Kind: retryable, Reason: "unexpected HTTP 101"}},
		{199, "", domain.Outcome{Kind: retryable, Reason: "unexpected HTTP 199"}},
		{0, "", domain.Outcome{Kind: retryable, Reason: "unexpected HTTP 0"}},
		{-1, "", domain.Outcome{Kind: retryable, Reason: "unexpected HTTP -1"}},
		{600, "5", domain.Outcome{Kind: retryable, RetryAfter: 5 * time.Second, Reason: "unexpected HTTP 600"}},
		{999, "", domain.Outcome{Kind: retryable, Reason: "unexpected HTTP 999"}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d %s", tt.status, tt.retryAfter), func(t *testing.T) {
			t.Parallel()
			if got := domain.ClassifyResponse(tt.status, tt.retryAfter, classifyNow); got != tt.want {
				t.Errorf("ClassifyResponse(%d, %q) = %v, want %v", tt.status, tt.retryAfter, got, tt.want)
			}
		})
	}
}

func TestClassifyResponseRetryAfter(t *testing.T) {
	t.Parallel()
	week := 7 * 24 * time.Hour
	imf := func(d time.Duration) string { return classifyNow.Add(d).Format(http.TimeFormat) }
	tests := []struct {
		name, value string
		want        time.Duration
	}{
		{"absent", "", 0},
		{"seconds", "120", 2 * time.Minute},
		{"zero seconds", "0", 0},
		{"leading zeros", "007", 7 * time.Second},
		{"surrounding spaces", "  30 ", 30 * time.Second},
		{"a week", "604800", week},
		{"over a week is clamped", "604801", week},
		{"overflowing uint64 is clamped", "99999999999999999999999999", week},
		{"negative", "-5", 0},
		{"plus sign", "+5", 0},
		{"fraction", "1.5", 0},
		{"unit", "5s", 0},
		{"garbage", "soon", 0},
		{"digits then garbage", "12abc", 0},
		{"IMF-fixdate in 90s", imf(90 * time.Second), 90 * time.Second},
		{"IMF-fixdate now", imf(0), 0},
		{"IMF-fixdate in the past", imf(-time.Hour), 0},
		{"IMF-fixdate in ten years", imf(10 * 365 * 24 * time.Hour), week},
		{"IMF-fixdate example of RFC 9110", "Sun, 06 Nov 1994 08:49:37 GMT", 0},
		{"RFC 850 date", classifyNow.Add(time.Minute).Format(time.RFC850), time.Minute},
		{"ANSI C date", classifyNow.Add(2 * time.Minute).Format(time.ANSIC), 2 * time.Minute},
		{"RFC 3339 is not an HTTP-date", classifyNow.Add(time.Minute).Format(time.RFC3339), 0},
		{"IMF-fixdate in another zone", "Sun, 01 Mar 2026 12:01:00 PST", 0},
		{"day names are case-insensitive, as in net/http", "sun, 01 Mar 2026 12:01:00 GMT", time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := domain.ClassifyResponse(503, tt.value, classifyNow)
			if got.RetryAfter != tt.want {
				t.Errorf("RetryAfter for %q = %s, want %s", tt.value, got.RetryAfter, tt.want)
			}
		})
	}
}

func TestClassifyError(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", 200) // 400 bytes
	tests := []struct {
		name string
		err  error
		want domain.Outcome
	}{
		{"forbidden destination", fmt.Errorf("dial 10.0.0.1:443: %w", domain.ErrForbiddenDestination),
			domain.Outcome{Kind: domain.OutcomePermanent, Reason: "dial 10.0.0.1:443: destination address is not allowed"}},
		{"forbidden destination deep in a chain", &net.OpError{Op: "dial", Net: "tcp", Err: fmt.Errorf("guard: %w", domain.ErrForbiddenDestination)},
			domain.Outcome{Kind: domain.OutcomePermanent, Reason: "dial tcp: guard: destination address is not allowed"}},
		{"timeout", context.DeadlineExceeded, domain.Outcome{Kind: domain.OutcomeRetryable, Reason: "context deadline exceeded"}},
		{"connection refused", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", errors.New("connection refused"))},
			domain.Outcome{Kind: domain.OutcomeRetryable, Reason: "dial tcp: connect: connection refused"}},
		{"DNS", &net.DNSError{Err: "no such host", Name: "example.invalid", IsNotFound: true},
			domain.Outcome{Kind: domain.OutcomeRetryable, Reason: "lookup example.invalid: no such host"}},
		{"TLS", errors.New("tls: failed to verify certificate: x509: certificate has expired"),
			domain.Outcome{Kind: domain.OutcomeRetryable, Reason: "tls: failed to verify certificate: x509: certificate has expired"}},
		{"nil", nil, domain.Outcome{Kind: domain.OutcomeRetryable, Reason: "unknown transport error"}},
		{"long text is shortened on a rune boundary", errors.New(long),
			domain.Outcome{Kind: domain.OutcomeRetryable, Reason: strings.Repeat("é", 126) + "…"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := domain.ClassifyError(tt.err)
			if got != tt.want {
				t.Errorf("ClassifyError = %v, want %v", got, tt.want)
			}
			if len(got.Reason) > 256 || !utf8.ValidString(got.Reason) {
				t.Errorf("Reason is %d bytes or invalid UTF-8", len(got.Reason))
			}
		})
	}
}

func TestOutcomeStrings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		got, want string
	}{
		{domain.OutcomeSuccess.String(), "success"},
		{domain.OutcomeRetryable.String(), "retryable"},
		{domain.OutcomePermanent.String(), "permanent"},
		{domain.OutcomeGone.String(), "gone"},
		{domain.OutcomeKind(0).String(), "OutcomeKind(0)"},
		{domain.OutcomeKind(42).String(), "OutcomeKind(42)"},
		{domain.Outcome{Kind: domain.OutcomeRetryable, Reason: "HTTP 503", RetryAfter: time.Second}.String(), "retryable: HTTP 503 (retry after 1s)"},
		{domain.Outcome{Kind: domain.OutcomeGone, Reason: "HTTP 410 Gone"}.String(), "gone: HTTP 410 Gone"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}

// FuzzRetryAfter checks the Retry-After reading against net/http's own
// HTTP-date parser and the delta-seconds grammar, for any header value and
// any clock.
func FuzzRetryAfter(f *testing.F) {
	for _, seed := range []string{
		"", "0", "120", " 30 ", "-5", "+5", "1.5", "99999999999999999999", "604801",
		"Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994",
		"Sun, 01 Mar 2026 12:01:00 GMT", "Sun, 01 Mar 2026 12:01:00 PST", "Mon, 31 Dec 9999 23:59:59 GMT",
	} {
		f.Add(seed, classifyNow.Unix())
	}
	f.Fuzz(func(t *testing.T, value string, nowUnix int64) {
		now := time.Unix(nowUnix, 0)
		got := domain.ClassifyResponse(503, value, now).RetryAfter
		const week = 7 * 24 * time.Hour
		if got < 0 || got > week {
			t.Fatalf("RetryAfter(%q) = %s, outside [0, %s]", value, got, week)
		}
		v := strings.TrimSpace(value)
		var want time.Duration
		if n, err := strconv.ParseUint(v, 10, 64); err == nil && v[0] != '+' {
			want = time.Duration(min(n, uint64(week/time.Second))) * time.Second
		} else if n := strings.TrimLeft(v, "0123456789"); v != "" && n == "" {
			want = week // all digits, overflowing uint64
		} else if date, err := http.ParseTime(v); err == nil {
			want = min(max(date.Sub(now), 0), week)
		}
		if got != want {
			t.Fatalf("RetryAfter(%q) at %s = %s, want %s", value, now, got, want)
		}
		if domain.ClassifyResponse(400, value, now).RetryAfter != 0 {
			t.Fatalf("Retry-After read for a permanent outcome")
		}
	})
}
