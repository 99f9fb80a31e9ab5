package domain

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxPointerLength bounds a JSON pointer a subscription may configure.
const MaxPointerLength = 256

// Pointer is a parsed RFC 6901 JSON pointer: the reference tokens,
// unescaped. The empty Pointer refers to the whole document.
type Pointer []string

// ParsePointer parses an RFC 6901 pointer such as "/data/customer_id".
// The empty string, which RFC 6901 reads as the whole document, is refused:
// an ordering key must name a member. "~" must be followed by 0 ("~") or 1
// ("/"); anything else is an error rather than a literal, so a pointer has
// exactly one spelling.
func ParsePointer(s string) (Pointer, error) {
	if s == "" {
		return nil, fmt.Errorf("must not be empty")
	}
	if len(s) > MaxPointerLength {
		return nil, fmt.Errorf("must be at most %d characters, got %d", MaxPointerLength, len(s))
	}
	if s[0] != '/' {
		return nil, fmt.Errorf("JSON pointer must start with \"/\", got %q", s)
	}
	if !utf8.ValidString(s) {
		return nil, fmt.Errorf("JSON pointer must be valid UTF-8")
	}
	p := Pointer(strings.Split(s[1:], "/"))
	offset := 1
	for i, tok := range p {
		if strings.IndexByte(tok, '~') >= 0 {
			unescaped, err := unescapeToken(tok)
			if err != nil {
				return nil, fmt.Errorf("JSON pointer %q: %v at byte %d", s, err, offset+strings.IndexByte(tok, '~'))
			}
			p[i] = unescaped
		}
		offset += len(tok) + 1
	}
	return p, nil
}

func unescapeToken(tok string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(tok); i++ {
		c := tok[i]
		if c != '~' {
			b.WriteByte(c)
			continue
		}
		if i+1 == len(tok) || tok[i+1] != '0' && tok[i+1] != '1' {
			return "", fmt.Errorf(`"~" must be followed by 0 or 1`)
		}
		i++
		if tok[i] == '0' {
			b.WriteByte('~')
		} else {
			b.WriteByte('/')
		}
	}
	return b.String(), nil
}

// pointerEscaper escapes "~" before "/", as RFC 6901 §3 requires.
var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")

// String returns p in RFC 6901 syntax; ParsePointer(p.String()) gives p
// back (for a non-empty p).
func (p Pointer) String() string {
	var b strings.Builder
	for _, tok := range p {
		b.WriteByte('/')
		pointerEscaper.WriteString(&b, tok)
	}
	return b.String()
}

// Lookup returns the value p refers to in doc, as raw JSON without
// surrounding whitespace, and whether it exists. Objects are walked by key
// (the first member when a key repeats), arrays by a decimal index without
// leading zeros; "-" (one past the end) and anything that cannot be walked
// are not found.
//
// It streams through doc and stops at the value, so looking up a key near
// the front of a large event costs little. It validates only what it reads:
// doc is expected to be valid JSON, and invalid JSON yields not found or a
// value found before the damage.
func (p Pointer) Lookup(doc []byte) (json.RawMessage, bool) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	// One buffer reused for every skipped value: decoding into a
	// RawMessage appends into its existing capacity.
	var skipped json.RawMessage
	for _, tok := range p {
		delim, err := dec.Token()
		if err != nil {
			return nil, false
		}
		switch delim {
		case json.Delim('{'):
			if !seekMember(dec, tok, &skipped) {
				return nil, false
			}
		case json.Delim('['):
			index, ok := arrayIndex(tok)
			if !ok || !seekElement(dec, index, &skipped) {
				return nil, false
			}
		default: // a scalar has no members
			return nil, false
		}
	}
	var value json.RawMessage
	if err := dec.Decode(&value); err != nil {
		return nil, false
	}
	return bytes.TrimSpace(value), true
}

// seekMember advances dec, just inside an object, to the value of key.
func seekMember(dec *json.Decoder, key string, skipped *json.RawMessage) bool {
	for dec.More() {
		name, err := dec.Token()
		if err != nil {
			return false
		}
		if name == key {
			return true
		}
		if dec.Decode(skipped) != nil {
			return false
		}
	}
	return false
}

// seekElement advances dec, just inside an array, to element index.
func seekElement(dec *json.Decoder, index int, skipped *json.RawMessage) bool {
	for i := 0; dec.More(); i++ {
		if i == index {
			return true
		}
		if dec.Decode(skipped) != nil {
			return false
		}
	}
	return false
}

// arrayIndex reads an RFC 6901 array index: "0" or digits without a leading
// zero. Indexes beyond any plausible array are refused rather than parsed.
func arrayIndex(tok string) (int, bool) {
	if tok == "" || len(tok) > 9 || len(tok) > 1 && tok[0] == '0' {
		return 0, false
	}
	n := 0
	for i := 0; i < len(tok); i++ {
		c := tok[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// OrderingKeyFor resolves sub's ordering key for ev: the subscription's
// pointer is applied to the event document
// {"id","type","source","data","ordering_key"}, so "/ordering_key" is the
// producer's own key and "/data/customer_id" a member of the payload. A JSON
// string gives the string itself, a number or boolean its JSON text, an
// object or array its compact JSON; null, a missing member, an empty string
// and a subscription without an ordering key give "" (unordered).
//
// A resolved key longer than MaxOrderingKeyLength is replaced by
// "sha256:<hex>" of itself: equal keys stay equal, and a pointer at a large
// object cannot put an unbounded value into every delivery row and index.
func OrderingKeyFor(sub Subscription, ev Event) string {
	if sub.OrderingKey == "" {
		return ""
	}
	p, err := ParsePointer(sub.OrderingKey)
	if err != nil {
		// Subscriptions are validated when stored; a pointer that no longer
		// parses orders nothing rather than failing every delivery.
		return ""
	}
	var key string
	switch member, rest := p[0], p[1:]; {
	case member == "data":
		value, ok := rest.Lookup(ev.Data)
		if !ok {
			return ""
		}
		key = orderingKeyText(value)
	case len(rest) > 0: // the other members are strings: nothing below them
		return ""
	case member == "ordering_key":
		key = ev.OrderingKey
	case member == "type":
		key = ev.Type
	case member == "source":
		key = ev.Source
	case member == "id":
		key = ev.ID
	}
	if len(key) > MaxOrderingKeyLength {
		sum := sha256.Sum256([]byte(key))
		key = "sha256:" + hex.EncodeToString(sum[:])
	}
	return key
}

// orderingKeyText renders a JSON value found by a pointer as a key.
func orderingKeyText(value json.RawMessage) string {
	switch value[0] {
	case '"':
		var s string
		if json.Unmarshal(value, &s) != nil {
			return ""
		}
		return s
	case 'n': // null
		return ""
	case '{', '[':
		var compact bytes.Buffer
		if json.Compact(&compact, value) != nil {
			return ""
		}
		return compact.String()
	}
	return string(value) // a number, true or false
}
