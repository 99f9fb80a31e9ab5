package domain

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Every string Dispatch accepts from outside must be text it can store
// and send on: valid UTF-8 without NUL. PostgreSQL's text columns refuse
// NUL and invalid UTF-8, so a string that passed ingest but not the
// database would fail, at fan-out or later, every row stored with it (an
// ordering key taken from an event's data is such a string); receivers'
// JSON parsers may refuse what a lone surrogate escape decodes to.

// TextProblem says what makes s, a string from outside, unfit as text
// (invalid UTF-8, a NUL), or "" when nothing does.
func TextProblem(s string) string {
	if strings.IndexByte(s, 0) >= 0 {
		return "must not contain NUL"
	}
	if !utf8.ValidString(s) {
		return "must be valid UTF-8"
	}
	return ""
}

// checkText returns a ValidationError on field when s is not valid UTF-8
// or holds a NUL.
func checkText(field, s string) error {
	if p := TextProblem(s); p != "" {
		return &ValidationError{Field: field, Message: p}
	}
	return nil
}

// checkJSONText checks that every string of data, a well-formed JSON
// document, is text: member names and values, as they decode (no raw
// invalid UTF-8, no \u0000, no \u escape of a lone surrogate). The error
// names the first offender's location below field, as in
// "data.items[2].name".
//
// Most payloads hold no \u escape, so a pass of utf8.Valid and a search
// for escapes clears them; only a payload that fails it is walked to find
// and name the location.
func checkJSONText(field string, data []byte) error {
	if utf8.Valid(data) && !hasBadEscape(data) {
		return nil
	}
	return locateBadText(field, data)
}

// hasBadEscape reports whether a JSON document holds an escape of NUL or
// of a lone surrogate. A \u is an escape when an odd run of backslashes
// ends just before the u: inside a string, backslashes pair from the left.
func hasBadEscape(d []byte) bool {
	for i := 0; ; {
		j := bytes.Index(d[i:], []byte(`\u`))
		if j < 0 {
			return false
		}
		j += i
		run := 1
		for j-run >= 0 && d[j-run] == '\\' {
			run++
		}
		i = j + 2
		if run%2 == 0 { // "\\u…": an escaped backslash, then a u
			continue
		}
		bad, next := escapeProblem(d, j)
		if bad != "" {
			return true
		}
		i = next
	}
}

// escapeProblem reads the \u escape at d[at:] (and the low surrogate that
// must follow a high one) and says what is wrong with it ("" if nothing),
// with the index just past what it read.
func escapeProblem(d []byte, at int) (problem string, next int) {
	r, ok := hex4(d, at+2)
	if !ok {
		return "", at + 2 // not well-formed; not ours to say
	}
	switch {
	case r == 0:
		return "must not contain NUL (\\u0000)", at + 6
	case r >= 0xDC00 && r <= 0xDFFF:
		return "must not contain a lone surrogate (\\u" + string(d[at+2:at+6]) + ")", at + 6
	case r >= 0xD800 && r <= 0xDBFF:
		if at+8 <= len(d) && d[at+6] == '\\' && d[at+7] == 'u' {
			if low, ok := hex4(d, at+8); ok && low >= 0xDC00 && low <= 0xDFFF {
				return "", at + 12
			}
		}
		return "must not contain a lone surrogate (\\u" + string(d[at+2:at+6]) + ")", at + 6
	}
	return "", at + 6
}

// hex4 reads the four hex digits at d[at:].
func hex4(d []byte, at int) (rune, bool) {
	if at+4 > len(d) {
		return 0, false
	}
	v, err := strconv.ParseUint(string(d[at:at+4]), 16, 16)
	return rune(v), err == nil
}

// stringProblem says what makes a JSON string literal (quotes included)
// unfit as text, or "".
func stringProblem(raw []byte) string {
	if !utf8.Valid(raw) {
		return "must be valid UTF-8"
	}
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		if raw[i+1] != 'u' {
			i++ // a one-letter escape
			continue
		}
		p, next := escapeProblem(raw, i)
		if p != "" {
			return p
		}
		i = next - 1
	}
	return ""
}

// locateBadText walks data with encoding/json's tokenizer, keeping the
// path, and checks each string's literal as it appears in data (the
// tokenizer's decoded strings have bad bytes replaced already).
func locateBadText(field string, data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	var stack []jsonLevel
	for {
		start := dec.InputOffset()
		tok, err := dec.Token()
		if err != nil {
			// data is well-formed JSON by contract and held a bad string;
			// if either is not so, the whole field is named.
			return &ValidationError{Field: field, Message: "must hold only valid UTF-8 strings without NUL"}
		}
		top := len(stack) - 1
		switch v := tok.(type) {
		case json.Delim:
			if v == '{' || v == '[' {
				stack = append(stack, jsonLevel{object: v == '{', atName: v == '{'})
				continue
			}
			stack = stack[:top]
			if top == 0 {
				return &ValidationError{Field: field, Message: "must hold only valid UTF-8 strings without NUL"}
			}
			stack[top-1].advance()
			continue
		case string:
			raw := bytes.TrimLeft(data[start:dec.InputOffset()], ",: \t\r\n")
			if top >= 0 && stack[top].atName {
				if p := stringProblem(raw); p != "" {
					stack[top].name = v
					return &ValidationError{Field: jsonLocation(field, stack), Message: "member name " + p}
				}
				stack[top].name, stack[top].atName = v, false
				continue
			}
			if p := stringProblem(raw); p != "" {
				return &ValidationError{Field: jsonLocation(field, stack), Message: p}
			}
		}
		if top >= 0 {
			stack[top].advance()
		}
	}
}

// jsonLevel is an object or array locateBadText is inside: the member or
// element it is reading.
type jsonLevel struct {
	object bool
	atName bool // an object's next string is a member name
	name   string
	index  int
}

func (l *jsonLevel) advance() {
	if l.object {
		l.atName = true
	} else {
		l.index++
	}
}

// jsonLocation renders the path of stack below field: ".name" for a
// member with a plain name, ["name"] (Go-quoted) for any other, [i] for
// an element.
func jsonLocation(field string, stack []jsonLevel) string {
	var b strings.Builder
	b.WriteString(field)
	for _, l := range stack {
		switch {
		case !l.object:
			fmt.Fprintf(&b, "[%d]", l.index)
		case plainName(l.name):
			b.WriteString(".")
			b.WriteString(l.name)
		default:
			b.WriteString("[")
			b.WriteString(strconv.Quote(l.name))
			b.WriteString("]")
		}
	}
	return b.String()
}

func plainName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !typeChar(c) {
			return false
		}
	}
	return true
}
