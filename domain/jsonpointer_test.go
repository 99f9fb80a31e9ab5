package domain_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/dispatch-webhooks/dispatch/domain"
)

func TestParsePointer(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    domain.Pointer
		wantErr string
	}{
		{"/data/customer_id", domain.Pointer{"data", "customer_id"}, ""},
		{"/ordering_key", domain.Pointer{"ordering_key"}, ""},
		{"/", domain.Pointer{""}, ""},
		{"//", domain.Pointer{"", ""}, ""},
		{"/a~1b", domain.Pointer{"a/b"}, ""},
		{"/m~0n", domain.Pointer{"m~n"}, ""},
		{"/~01", domain.Pointer{"~1"}, ""}, // RFC 6901 §4: ~1 is decoded after ~0, not before
		{"/~10", domain.Pointer{"/0"}, ""},
		{"/~0~1~0", domain.Pointer{"~/~"}, ""},
		{"/data/items/0", domain.Pointer{"data", "items", "0"}, ""},
		{"/données/clé", domain.Pointer{"données", "clé"}, ""},
		{"/" + strings.Repeat("a", 255), domain.Pointer{strings.Repeat("a", 255)}, ""},

		{"", nil, "must not be empty"},
		{"data/customer_id", nil, `JSON pointer must start with "/", got "data/customer_id"`},
		{"#/data", nil, `must start with "/"`},
		{"/" + strings.Repeat("a", 256), nil, "must be at most 256 characters, got 257"},
		{"/a~", nil, `JSON pointer "/a~": "~" must be followed by 0 or 1 at byte 2`},
		{"/a/b~2", nil, `JSON pointer "/a/b~2": "~" must be followed by 0 or 1 at byte 4`},
		{"/~", nil, `"~" must be followed by 0 or 1 at byte 1`},
		{"/a\xff", nil, "must be valid UTF-8"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			got, err := domain.ParsePointer(tt.in)
			checkErr(t, "ParsePointer("+tt.in+")", err, tt.wantErr)
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("ParsePointer(%q) = %#v, want %#v", tt.in, got, tt.want)
			}
			if err == nil && got.String() != tt.in {
				t.Errorf("String() = %q, want %q", got.String(), tt.in)
			}
		})
	}
}

func TestPointerString(t *testing.T) {
	t.Parallel()
	tests := []struct {
		p    domain.Pointer
		want string
	}{
		{nil, ""},
		{domain.Pointer{""}, "/"},
		{domain.Pointer{"a/b", "m~n"}, "/a~1b/m~0n"},
		{domain.Pointer{"~1"}, "/~01"},
		{domain.Pointer{"/~"}, "/~1~0"},
	}
	for _, tt := range tests {
		if got := tt.p.String(); got != tt.want {
			t.Errorf("%#v.String() = %q, want %q", tt.p, got, tt.want)
		}
	}
}

// rfc6901Doc is the example document of RFC 6901 §5.
const rfc6901Doc = `{
	"foo": ["bar", "baz"],
	"": 0,
	"a/b": 1,
	"c%d": 2,
	"e^f": 3,
	"g|h": 4,
	"i\\j": 5,
	"k\"l": 6,
	" ": 7,
	"m~n": 8
}`

func TestPointerLookup(t *testing.T) {
	t.Parallel()
	const nested = `{"a": {"b": [10, {"c": "deep"}, [true]], "0": "zero-key"}, "n": null, "e": "\u00e9", "dup": 1, "dup": 2,
		"big": [0,1,2,3,4,5,6,7,8,9,10,11]}`
	tests := []struct {
		name    string
		doc     string
		pointer string // "" means the whole document
		want    string // "" means not found
	}{
		{"RFC whole document", rfc6901Doc, "", rfc6901Doc},
		{"RFC /foo", rfc6901Doc, "/foo", `["bar", "baz"]`},
		{"RFC /foo/0", rfc6901Doc, "/foo/0", `"bar"`},
		{"RFC /", rfc6901Doc, "/", `0`},
		{"RFC /a~1b", rfc6901Doc, "/a~1b", `1`},
		{"RFC /c%d", rfc6901Doc, "/c%d", `2`},
		{"RFC /e^f", rfc6901Doc, "/e^f", `3`},
		{"RFC /g|h", rfc6901Doc, "/g|h", `4`},
		{`RFC /i\j`, rfc6901Doc, `/i\j`, `5`},
		{`RFC /k"l`, rfc6901Doc, `/k"l`, `6`},
		{"RFC / ", rfc6901Doc, "/ ", `7`},
		{"RFC /m~0n", rfc6901Doc, "/m~0n", `8`},

		{"nested object in array", nested, "/a/b/1/c", `"deep"`},
		{"last element", nested, "/big/11", `11`},
		{"array in array", nested, "/a/b/2/0", `true`},
		{"numeric key of an object", nested, "/a/0", `"zero-key"`},
		{"null is found", nested, "/n", `null`},
		{"escaped key in the document", `{"\u0061":1}`, "/a", `1`},
		{"escaped string value stays raw", nested, "/e", `"\u00e9"`},
		{"first of duplicate keys", nested, "/dup", `1`},
		{"whitespace around the value", `{"a" :   [ 1 , 2 ]   }`, "/a", `[ 1 , 2 ]`},

		{"missing key", nested, "/x", ""},
		{"missing nested key", nested, "/a/x", ""},
		{"index past the end", nested, "/a/b/3", ""},
		{"dash is past the end", nested, "/a/b/-", ""},
		{"leading zero index", nested, "/a/b/01", ""},
		{"signed index", nested, "/a/b/+1", ""},
		{"negative index", nested, "/a/b/-1", ""},
		{"exponent index", nested, "/a/b/1e0", ""},
		{"empty index", nested, "/a/b/", ""},
		{"huge index", nested, "/big/99999999999999999999", ""},
		{"into a string", nested, "/e/0", ""},
		{"into null", nested, "/n/x", ""},
		{"into a number", nested, "/dup/0", ""},
		{"keys are case-sensitive", `{"A":1}`, "/a", ""},
		{"empty document", ``, "/a", ""},
		{"invalid document", `{"a":`, "/a", ""},
		{"array document", `[1,[2,3]]`, "/1/0", `2`},
		{"scalar document", `"s"`, "", `"s"`},
		{"skipping an invalid sibling", `{"x": tru, "a": 1}`, "/a", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var p domain.Pointer
			if tt.pointer != "" {
				var err error
				if p, err = domain.ParsePointer(tt.pointer); err != nil {
					t.Fatal(err)
				}
			}
			got, ok := p.Lookup([]byte(tt.doc))
			if ok != (tt.want != "") || string(got) != tt.want {
				t.Fatalf("Lookup(%q) = %q, %v; want %q", tt.pointer, got, ok, tt.want)
			}
		})
	}
}

func TestOrderingKeyFor(t *testing.T) {
	t.Parallel()
	ev := domain.Event{
		ID: "evt_1", Type: "order.created", Source: "shop", OrderingKey: "cust-7",
		Data: json.RawMessage(`{"customer_id":"c_42","n":42,"f":1.50,"t":true,"z":null,"s":"","u":"\u00e9\"",` +
			`"o":{"b": 1, "a": [1, 2]},"list":["x",{"y":null}],"long":"` + strings.Repeat("x", 257) + `","max":"` + strings.Repeat("y", 256) + `"}`),
	}
	longSum := sha256.Sum256([]byte(strings.Repeat("x", 257)))
	tests := []struct {
		pointer string
		want    string
	}{
		{"", ""},
		{"/ordering_key", "cust-7"},
		{"/type", "order.created"},
		{"/source", "shop"},
		{"/id", "evt_1"},
		{"/data/customer_id", "c_42"},
		{"/data/n", "42"},
		{"/data/f", "1.50"},
		{"/data/t", "true"},
		{"/data/z", ""},
		{"/data/s", ""},
		{"/data/u", "é\""},
		{"/data/o", `{"b":1,"a":[1,2]}`},
		{"/data/list", `["x",{"y":null}]`},
		{"/data/list/0", "x"},
		{"/data/list/1/y", ""},
		{"/data/missing", ""},
		{"/data/max", strings.Repeat("y", 256)},
		{"/data/long", "sha256:" + hex.EncodeToString(longSum[:])},
		{"/data", "sha256:" + hex.EncodeToString(sha256Sum(compact(t, ev.Data)))},
		{"/type/0", ""},
		{"/ordering_key/x", ""},
		{"/timestamp", ""},
		{"/unknown", ""},
		{"/", ""},
		{"not a pointer", ""},
	}
	for _, tt := range tests {
		t.Run(tt.pointer, func(t *testing.T) {
			t.Parallel()
			if got := domain.OrderingKeyFor(domain.Subscription{OrderingKey: tt.pointer}, ev); got != tt.want {
				t.Errorf("OrderingKeyFor(%q) = %q, want %q", tt.pointer, got, tt.want)
			}
		})
	}

	t.Run("NewDelivery resolves the key", func(t *testing.T) {
		t.Parallel()
		d := domain.NewDelivery(ev, domain.Subscription{ID: "sub_1", OrderingKey: "/data/customer_id"}, breakerNow)
		if d.OrderingKey != "c_42" {
			t.Errorf("NewDelivery OrderingKey = %q, want c_42", d.OrderingKey)
		}
	})
	t.Run("empty event key is unordered", func(t *testing.T) {
		t.Parallel()
		if got := domain.OrderingKeyFor(domain.Subscription{OrderingKey: "/ordering_key"}, domain.Event{}); got != "" {
			t.Errorf("OrderingKeyFor = %q, want empty", got)
		}
	})
}

func compact(t *testing.T, raw []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func sha256Sum(b []byte) []byte {
	s := sha256.Sum256(b)
	return s[:]
}

// FuzzParsePointer: no input panics, and anything accepted prints back as
// itself and parses again to the same tokens.
func FuzzParsePointer(f *testing.F) {
	for _, s := range []string{"", "/", "//", "/a~1b", "/m~0n", "/~01", "/~", "/a~2", "a", "/données", "/\xff", "/" + strings.Repeat("a", 255)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := domain.ParsePointer(s)
		if err != nil {
			return
		}
		if len(p) == 0 {
			t.Fatalf("ParsePointer(%q) accepted an empty pointer", s)
		}
		if p.String() != s {
			t.Fatalf("ParsePointer(%q).String() = %q", s, p.String())
		}
		again, err := domain.ParsePointer(p.String())
		if err != nil || !reflect.DeepEqual(again, p) {
			t.Fatalf("round trip of %q: %#v, %v; want %#v", s, again, err, p)
		}
	})
}

// FuzzPointerString: any tokens print as a pointer that parses back to
// them, unless the printed form is over the length limit or not UTF-8.
func FuzzPointerString(f *testing.F) {
	f.Add("a/b", "m~n")
	f.Add("~1", "")
	f.Add("", "/~0")
	f.Add("\xff", "x")
	f.Fuzz(func(t *testing.T, a, b string) {
		p := domain.Pointer{a, b}
		s := p.String()
		got, err := domain.ParsePointer(s)
		switch {
		case !utf8.ValidString(s) || len(s) > domain.MaxPointerLength:
			if err == nil {
				t.Fatalf("ParsePointer(%q) accepted an invalid or over-long pointer", s)
			}
		case err != nil:
			t.Fatalf("ParsePointer(%q) = %v", s, err)
		case !reflect.DeepEqual(got, p):
			t.Fatalf("ParsePointer(%q) = %#v, want %#v", s, got, p)
		}
	})
}

// FuzzPointerLookup compares the streaming Lookup with decoding the whole
// document and walking it, on the canonical form of any valid JSON (where
// keys are unique), and checks that no input panics and no ordering key
// outgrows its limit.
func FuzzPointerLookup(f *testing.F) {
	f.Add([]byte(rfc6901Doc), "/foo/1")
	f.Add([]byte(rfc6901Doc), "/m~0n")
	f.Add([]byte(`{"a":{"b":[1,{"c":null}]}}`), "/a/b/1/c")
	f.Add([]byte(`[[[]]]`), "/0/0/0")
	f.Add([]byte(`{"a":1,"a":2}`), "/a")
	f.Add([]byte(`{"a":`), "/a")
	f.Add([]byte(`{"customer":{"id":7}}`), "/customer")
	f.Fuzz(func(t *testing.T, doc []byte, pointer string) {
		p, err := domain.ParsePointer(pointer)
		if err != nil {
			return
		}
		raw, ok := p.Lookup(doc) // must not panic on anything
		if ok && !json.Valid(raw) {
			t.Fatalf("Lookup(%q) in %q returned invalid JSON %q", pointer, doc, raw)
		}
		key := domain.OrderingKeyFor(domain.Subscription{OrderingKey: "/data" + pointer}, domain.Event{Data: doc})
		if len(key) > domain.MaxOrderingKeyLength {
			t.Fatalf("ordering key of %d bytes", len(key))
		}

		var tree any
		if decodeNumbers(doc, &tree) != nil {
			return
		}
		canonical, err := json.Marshal(tree)
		if err != nil {
			t.Fatal(err)
		}
		want, wantOK := walk(tree, p)
		raw, ok = p.Lookup(canonical)
		if ok != wantOK {
			t.Fatalf("Lookup(%q) in %s found=%v, decoding says %v", pointer, canonical, ok, wantOK)
		}
		if !ok {
			return
		}
		var got any
		if err := decodeNumbers(raw, &got); err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("Lookup(%q) in %s = %s (%v), decoding says %#v", pointer, canonical, raw, err, want)
		}
	})
}

func decodeNumbers(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err == nil {
		return strconv.ErrSyntax // trailing data: not one JSON value
	}
	return nil
}

// walk is RFC 6901 evaluation on a decoded document.
func walk(v any, p domain.Pointer) (any, bool) {
	for _, tok := range p {
		switch x := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = x[tok]; !ok {
				return nil, false
			}
		case []any:
			if tok == "" || len(tok) > 1 && tok[0] == '0' || strings.Trim(tok, "0123456789") != "" {
				return nil, false
			}
			i, err := strconv.Atoi(tok)
			if err != nil || i >= len(x) {
				return nil, false
			}
			v = x[i]
		default:
			return nil, false
		}
	}
	return v, true
}
