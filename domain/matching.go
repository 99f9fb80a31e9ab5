package domain

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Event types name what happened, as dot-separated segments from the
// general to the specific ("order.created", "invoice.payment.failed"), so a
// subscription can take a whole family with a final ".*" (SPEC §7).

// MaxEventTypeLength bounds an event type and a subscription's type pattern.
const MaxEventTypeLength = 128

// MatchAllTypes is the pattern that matches every event type.
const MatchAllTypes = "*"

// familySuffix ends a pattern that matches every type below a prefix.
const familySuffix = ".*"

// ValidateEventType checks that t is one or more segments of [a-zA-Z0-9_-]
// joined by single dots, at most MaxEventTypeLength bytes. The message names
// the offending character or segment; callers add the field name.
func ValidateEventType(t string) error {
	if t == "" {
		return fmt.Errorf("must not be empty")
	}
	if len(t) > MaxEventTypeLength {
		return fmt.Errorf("must be at most %d characters, got %d", MaxEventTypeLength, len(t))
	}
	segmentStart := 0
	for i := 0; i < len(t); i++ {
		c := t[i]
		switch {
		case c == '.':
			if i == segmentStart {
				return emptySegment(t, i)
			}
			segmentStart = i + 1
		case !typeChar(c):
			// Report the rune, not the byte, so "é" reads as "é".
			r, _ := utf8.DecodeRuneInString(t[i:])
			return fmt.Errorf("%q has invalid character %q at byte %d; allowed are letters, digits, '_', '-' and '.' between segments", t, r, i)
		}
	}
	if segmentStart == len(t) {
		return emptySegment(t, len(t))
	}
	return nil
}

func emptySegment(t string, at int) error {
	return fmt.Errorf("%q has an empty segment at byte %d; segments are joined by single dots", t, at)
}

func typeChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// ValidateTypePattern checks a subscription's event-type pattern: an exact
// event type, "*" alone (every type), or an event type followed by ".*"
// (every type below it: "order.*"). A '*' anywhere else is refused rather
// than read as a glob, so "order*" or "*.created" cannot silently match
// nothing or more than intended.
func ValidateTypePattern(p string) error {
	if p == MatchAllTypes {
		return nil
	}
	prefix, family := strings.CutSuffix(p, familySuffix)
	if strings.Contains(prefix, "*") {
		return fmt.Errorf("%q: '*' is only allowed alone or as a final \".*\"", p)
	}
	if len(p) > MaxEventTypeLength {
		return fmt.Errorf("must be at most %d characters, got %d", MaxEventTypeLength, len(p))
	}
	if family && prefix == "" {
		return fmt.Errorf("%q: \".*\" must follow an event type, as in \"order.*\"; use \"*\" alone to match every type", p)
	}
	return ValidateEventType(prefix)
}

// MatchType reports whether eventType matches pattern: "*" matches every
// type, "order.*" matches "order.created" and "order.item.added" but not
// "order" or "orders.created", and any other pattern matches only itself.
// Matching is case-sensitive. Both arguments are assumed valid (they were
// validated when the event and subscription were created); fan-out calls
// this for every subscription of every event, so it does not re-validate.
func MatchType(pattern, eventType string) bool {
	if pattern == MatchAllTypes {
		return true
	}
	if strings.HasSuffix(pattern, familySuffix) {
		// Keep the dot in the prefix so "order.*" cannot match "orders.x".
		prefix := pattern[:len(pattern)-1]
		return len(eventType) > len(prefix) && strings.HasPrefix(eventType, prefix)
	}
	return pattern == eventType
}
