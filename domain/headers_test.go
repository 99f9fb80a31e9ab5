package domain_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/dispatch-webhooks/dispatch/domain"
)

func TestValidateHeaders(t *testing.T) {
	t.Parallel()
	many := func(n int) map[string]string {
		h := map[string]string{}
		for i := range n {
			h[fmt.Sprintf("X-H%d", i)] = "v"
		}
		return h
	}
	tests := []struct {
		name    string
		headers map[string]string
		field   string // "" when valid
		says    string // part of the message
	}{
		{"none", nil, "", ""},
		{"one", map[string]string{"X-Tenant": "acme"}, "", ""},
		{"authorization", map[string]string{"Authorization": "Bearer abc.def-ghi"}, "", ""},
		{"every token character", map[string]string{"!#$%&'*+-.^_`|~09azAZ": "v"}, "", ""},
		{"inner spaces and tabs", map[string]string{"X-A": "a b\tc"}, "", ""},
		{"every visible ASCII character", map[string]string{"X-A": visibleASCII()}, "", ""},
		{"UTF-8 as obs-text", map[string]string{"X-A": "café ☕"}, "", ""},
		{"empty value", map[string]string{"X-A": ""}, "", ""},
		{"20 headers", many(domain.MaxHeaders), "", ""},
		{"8 KiB in all", map[string]string{"X-A": strings.Repeat("v", domain.MaxHeadersBytes-3)}, "", ""},

		{"21 headers", many(domain.MaxHeaders + 1), "headers", "at most 20 entries, got 21"},
		{"8 KiB and a byte", map[string]string{"X-A": strings.Repeat("v", domain.MaxHeadersBytes-2)}, "headers", "at most 8192 bytes, got 8193"},
		{"900 KB value", map[string]string{"X-A": strings.Repeat("v", 900_000)}, "headers", "at most 8192 bytes, got 900003"},
		{"empty name", map[string]string{"": "v"}, "headers", `"" is not a valid header name`},
		{"space in name", map[string]string{"X Bad": "v"}, "headers", `"X Bad" is not a valid header name`},
		{"colon in name", map[string]string{"X-A:": "v"}, "headers", "not a valid header name"},
		{"non-ASCII name", map[string]string{"X-Café": "v"}, "headers", "not a valid header name"},
		{"NUL in name", map[string]string{"X-\x00": "v"}, "headers", "not a valid header name"},
		{"long name", map[string]string{strings.Repeat("n", 257): "v"}, "headers", "not a valid header name"},
		{"reserved", map[string]string{"Webhook-Signature": "v"}, "headers.Webhook-Signature", "set by Dispatch"},
		{"reserved in lower case", map[string]string{"content-type": "v"}, "headers.content-type", "set by Dispatch"},
		{"host", map[string]string{"Host": "internal"}, "headers.Host", "set by Dispatch"},
		{"same name twice", map[string]string{"X-A": "1", "x-a": "2"}, "headers.x-a", "names the same header as X-A"},
		{"CR LF injection", map[string]string{"X-A": "a\r\nX-B: b"}, "headers.X-A", "control character 0x0D (at byte 1)"},
		{"NUL", map[string]string{"X-A": "a\x00"}, "headers.X-A", "control character 0x00"},
		{"vertical tab", map[string]string{"X-A": "a\x0bb"}, "headers.X-A", "control character 0x0B (at byte 1)"},
		{"DEL", map[string]string{"X-A": "a\x7fb"}, "headers.X-A", "control character 0x7F (at byte 1)"},
		{"form feed", map[string]string{"X-A": "\x0c"}, "headers.X-A", "control character 0x0C"},
		{"escape", map[string]string{"X-A": "\x1b[31m"}, "headers.X-A", "control character 0x1B"},
		{"leading space", map[string]string{"X-A": " a"}, "headers.X-A", "must not start or end with a space or tab"},
		{"trailing tab", map[string]string{"X-A": "a\t"}, "headers.X-A", "must not start or end with a space or tab"},
		{"only a space", map[string]string{"X-A": " "}, "headers.X-A", "must not start or end"},
		{"invalid UTF-8", map[string]string{"X-A": "a\xffb"}, "headers.X-A", "not valid UTF-8"},
	}
	for _, name := range []string{"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization", "TE", "Trailer", "Transfer-Encoding", "Upgrade", "upgrade"} {
		tests = append(tests, struct {
			name    string
			headers map[string]string
			field   string
			says    string
		}{"hop-by-hop " + name, map[string]string{name: "v"}, "headers." + name, "hop-by-hop"})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := domain.ValidateHeaders(tt.headers)
			if tt.field == "" {
				if err != nil {
					t.Fatalf("ValidateHeaders = %v, want nil", err)
				}
				return
			}
			var invalid *domain.ValidationError
			if !errors.As(err, &invalid) {
				t.Fatalf("ValidateHeaders = %v, want a ValidationError on %s", err, tt.field)
			}
			if invalid.Field != tt.field || !strings.Contains(invalid.Message, tt.says) {
				t.Errorf("error = %s: %s, want field %s saying %q", invalid.Field, invalid.Message, tt.field, tt.says)
			}
			if len(invalid.Message) > 300 {
				t.Errorf("message is %d bytes long: %.100s…", len(invalid.Message), invalid.Message)
			}
		})
	}
}

// TestValidateHeadersQuotesNoValue checks that a refusal never repeats a
// value, which may be a downstream credential.
func TestValidateHeadersQuotesNoValue(t *testing.T) {
	t.Parallel()
	const secret = "Bearer s3cr3t-downstream-token"
	for _, value := range []string{secret + "\x0b", " " + secret, secret + "\xff"} {
		err := domain.ValidateHeaders(map[string]string{"Authorization": value})
		if err == nil || strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("ValidateHeaders(%q) = %v, want an error that does not quote the value", value, err)
		}
	}
}

func visibleASCII() string {
	var b strings.Builder
	for c := byte(0x21); c < 0x7f; c++ {
		b.WriteByte(c)
	}
	return b.String()
}

// referenceFieldValue is RFC 9110 §5.5 spelled out: field-vchar
// (VCHAR / obs-text, obs-text as UTF-8 here) first and last, SP and HTAB
// only between.
func referenceFieldValue(v string) bool {
	if !utf8.ValidString(v) {
		return false
	}
	vchar := func(c byte) bool { return c >= 0x21 && c <= 0x7e || c >= 0x80 }
	for i := 0; i < len(v); i++ {
		c := v[i]
		inner := i > 0 && i < len(v)-1
		if !vchar(c) && (!inner || c != ' ' && c != '\t') {
			return false
		}
	}
	return true
}

// FuzzValidateHeaders feeds arbitrary header names and values: validation
// must not panic, must accept exactly the RFC 9110 field-values (for a
// plain name), must never accept a name that is not a token, a reserved or
// hop-by-hop name, or a header that could end the header section, and
// must never quote the value.
func FuzzValidateHeaders(f *testing.F) {
	for _, seed := range [][2]string{
		{"X-Tenant", "acme"}, {"Authorization", "Bearer x"}, {"X-A", "a\r\nX-B: b"}, {"X-A", "a\x0bb"},
		{"X-A", "a\x7f"}, {"Upgrade", "websocket"}, {"X Bad", "v"}, {"X-A", " a"}, {"X-A", "café"}, {"X-A", "\xff"},
		{"tE", "trailers"}, {"", ""},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, name, value string) {
		err := domain.ValidateHeaders(map[string]string{name: value})
		if err != nil && len(value) >= 16 && !strings.Contains(name, value) && strings.Contains(err.Error(), value) {
			t.Fatalf("the error quotes the value: %v", err)
		}
		if plain := domain.ValidateHeaders(map[string]string{"X-Plain": value}); (plain == nil) != (referenceFieldValue(value) && len(value)+7 <= domain.MaxHeadersBytes) {
			t.Fatalf("value %q: ValidateHeaders = %v, reference field-value %t", value, plain, referenceFieldValue(value))
		}
		if err != nil {
			return
		}
		if name == "" || strings.ContainsAny(name, " \t\r\n:\x00()<>@,;\\\"/[]?={}") || strings.ContainsAny(value, "\r\n\x00") {
			t.Fatalf("accepted %q: %q", name, value)
		}
		for i := 0; i < len(name); i++ {
			if name[i] <= 0x20 || name[i] >= 0x7f {
				t.Fatalf("accepted the name %q, which is not a token", name)
			}
		}
		switch strings.ToLower(name) {
		case "connection", "keep-alive", "proxy-connection", "proxy-authenticate", "proxy-authorization", "te", "trailer",
			"transfer-encoding", "upgrade", "host", "content-length", "content-type", "user-agent",
			"webhook-id", "webhook-timestamp", "webhook-signature":
			t.Fatalf("accepted the reserved or hop-by-hop name %q", name)
		}
	})
}
