package domain_test

import (
	"strings"
	"testing"

	"github.com/dispatch-webhooks/dispatch/domain"
)

func TestValidateEventType(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		wantErr string // substring; "" means valid
	}{
		{"order", ""},
		{"order.created", ""},
		{"invoice.payment.failed", ""},
		{"A-b_C.0-9", ""},
		{"_", ""},
		{"-.-", ""},
		{strings.Repeat("a", 128), ""},
		{strings.Repeat("a.", 63) + "ab", ""},

		{"", "must not be empty"},
		{strings.Repeat("a", 129), "must be at most 128 characters, got 129"},
		{".order", `".order" has an empty segment at byte 0`},
		{"order.", `"order." has an empty segment at byte 6`},
		{"order..created", `"order..created" has an empty segment at byte 6`},
		{".", "empty segment at byte 0"},
		{"order created", `invalid character ' ' at byte 5`},
		{"order.*", `invalid character '*' at byte 6`},
		{"*", `invalid character '*' at byte 0`},
		{"order/created", `invalid character '/' at byte 5`},
		{"commande.créée", `invalid character 'é' at byte 11`},
		{"order\x00", `invalid character '\x00' at byte 5`},
		{"order\xff", `invalid character '�' at byte 5`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			checkErr(t, "ValidateEventType("+tt.in+")", domain.ValidateEventType(tt.in), tt.wantErr)
		})
	}
}

func TestValidateTypePattern(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		wantErr string
	}{
		{"*", ""},
		{"order", ""},
		{"order.created", ""},
		{"order.*", ""},
		{"order.item.*", ""},
		{strings.Repeat("a", 126) + ".*", ""},
		{strings.Repeat("a", 128), ""},

		{"", "must not be empty"},
		{".*", `".*" must follow an event type`},
		{"**", `'*' is only allowed alone or as a final ".*"`},
		{"order*", `'*' is only allowed alone`},
		{"order.**", `'*' is only allowed alone`},
		{"*.created", `'*' is only allowed alone`},
		{"order.*.created", `'*' is only allowed alone`},
		{"order.*.*", `'*' is only allowed alone`},
		{"*.*", `'*' is only allowed alone`},
		{"order.", "empty segment"},
		{"order..*", "empty segment"},
		{"Order Created.*", "invalid character ' '"},
		{strings.Repeat("a", 127) + ".*", "must be at most 128 characters, got 129"},
		{strings.Repeat("a", 129), "must be at most 128 characters, got 129"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			checkErr(t, "ValidateTypePattern("+tt.in+")", domain.ValidateTypePattern(tt.in), tt.wantErr)
		})
	}
}

func TestMatchType(t *testing.T) {
	t.Parallel()
	tests := []struct {
		pattern, eventType string
		want               bool
	}{
		{"*", "order", true},
		{"*", "order.created", true},
		{"order.created", "order.created", true},
		{"order.created", "order.updated", false},
		{"order.created", "Order.created", false},
		{"order.created", "order.created.v2", false},
		{"order.created", "order", false},
		{"order.*", "order.created", true},
		{"order.*", "order.item.added", true},
		{"order.*", "order", false},
		{"order.*", "orders.created", false},
		{"order.*", "order_x.created", false},
		{"order.*", "Order.created", false},
		{"order.*", "reorder.created", false},
		{"order.item.*", "order.item.added", true},
		{"order.item.*", "order.items.added", false},
		{"order.item.*", "order.item", false},
		{"order.item.*", "order.created", false},
		{"order", "order", true},
		{"order", "order.created", false},
	}
	for _, tt := range tests {
		t.Run(tt.pattern+"~"+tt.eventType, func(t *testing.T) {
			t.Parallel()
			if got := domain.MatchType(tt.pattern, tt.eventType); got != tt.want {
				t.Errorf("MatchType(%q, %q) = %v, want %v", tt.pattern, tt.eventType, got, tt.want)
			}
		})
	}
}

func TestSubscriptionMatches(t *testing.T) {
	t.Parallel()
	sub := domain.Subscription{EventTypes: []string{"invoice.paid", "order.*"}}
	for eventType, want := range map[string]bool{
		"invoice.paid": true, "order.created": true, "invoice.failed": false, "order": false,
	} {
		if got := sub.Matches(eventType); got != want {
			t.Errorf("Matches(%q) = %v, want %v", eventType, got, want)
		}
	}
}

// matchBySegments is an independent reading of SPEC §7's matching rule, for
// the fuzzer to compare MatchType against.
func matchBySegments(pattern, eventType string) bool {
	if pattern == "*" {
		return true
	}
	ps, ts := strings.Split(pattern, "."), strings.Split(eventType, ".")
	if ps[len(ps)-1] == "*" {
		prefix := ps[:len(ps)-1]
		if len(ts) <= len(prefix) {
			return false
		}
		for i := range prefix {
			if prefix[i] != ts[i] {
				return false
			}
		}
		return true
	}
	return pattern == eventType
}

var typeSeeds = []string{
	"", "*", ".", ".*", "*.*", "order", "order.created", "order.*", "order.item.*", "orders.x", "order.",
	"order..x", "a-b_c.D9", "order*", "é.x", "order.*.x", strings.Repeat("a", 128), strings.Repeat("a", 127) + ".*",
}

// FuzzValidateEventType: validation agrees with the grammar, and a valid
// type always matches itself and "*".
func FuzzValidateEventType(f *testing.F) {
	for _, s := range typeSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, eventType string) {
		err := domain.ValidateEventType(eventType)
		if valid := grammarValidType(eventType); (err == nil) != valid {
			t.Fatalf("ValidateEventType(%q) = %v, grammar says valid=%v", eventType, err, valid)
		}
		if err != nil {
			return
		}
		if domain.ValidateTypePattern(eventType) != nil {
			t.Fatalf("valid type %q is not a valid pattern", eventType)
		}
		if !domain.MatchType(eventType, eventType) || !domain.MatchType("*", eventType) {
			t.Fatalf("%q does not match itself or *", eventType)
		}
		if len(eventType) <= 126 && domain.ValidateTypePattern(eventType+".*") != nil {
			t.Fatalf("%q.* is not a valid pattern", eventType)
		}
		if domain.MatchType(eventType+".*", eventType) {
			t.Fatalf("%q.* matches %q itself", eventType, eventType)
		}
	})
}

// grammarValidType is SPEC §7 written as plainly as possible.
func grammarValidType(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for _, seg := range strings.Split(s, ".") {
		if seg == "" || strings.Trim(seg, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != "" {
			return false
		}
	}
	return true
}

// FuzzValidateTypePattern: a valid pattern is "*", a valid type, or a valid
// type plus ".*", and never contains '*' anywhere else.
func FuzzValidateTypePattern(f *testing.F) {
	for _, s := range typeSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, pattern string) {
		err := domain.ValidateTypePattern(pattern)
		prefix, family := strings.CutSuffix(pattern, ".*")
		valid := pattern == "*" || len(pattern) <= 128 && grammarValidType(prefix)
		if (err == nil) != valid {
			t.Fatalf("ValidateTypePattern(%q) = %v, want valid=%v", pattern, err, valid)
		}
		if err == nil && pattern != "*" && family && strings.Contains(prefix, "*") {
			t.Fatalf("ValidateTypePattern(%q) accepted a '*' inside", pattern)
		}
	})
}

// FuzzMatchType: for a valid pattern and a valid type, MatchType agrees
// with the segment-wise reading of the rule; and it never panics on any
// input.
func FuzzMatchType(f *testing.F) {
	for _, p := range typeSeeds {
		for _, e := range []string{"order", "order.created", "order.item.added", "orders.x", ""} {
			f.Add(p, e)
		}
	}
	f.Fuzz(func(t *testing.T, pattern, eventType string) {
		got := domain.MatchType(pattern, eventType)
		if domain.ValidateTypePattern(pattern) != nil || domain.ValidateEventType(eventType) != nil {
			return
		}
		if want := matchBySegments(pattern, eventType); got != want {
			t.Fatalf("MatchType(%q, %q) = %v, want %v", pattern, eventType, got, want)
		}
		if got && pattern != "*" && !strings.HasSuffix(pattern, ".*") && pattern != eventType {
			t.Fatalf("exact pattern %q matched %q", pattern, eventType)
		}
	})
}

// checkErr compares err with a wanted message substring ("" = no error).
func checkErr(t *testing.T, what string, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Fatalf("%s = %v, want nil", what, err)
	case want != "" && err == nil:
		t.Fatalf("%s = nil, want error containing %q", what, want)
	case want != "" && !strings.Contains(err.Error(), want):
		t.Fatalf("%s = %q, want it to contain %q", what, err, want)
	}
}
