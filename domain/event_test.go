package domain

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestNewEventValidates(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 5, 6, 7, 8, 9, 123456789, time.UTC)
	tests := []struct {
		name  string
		in    NewEventInput
		field string
	}{
		{"valid", NewEventInput{Type: "order.created", Source: "shop", Data: json.RawMessage(`{"a":1}`)}, ""},
		{"empty object", NewEventInput{Type: "a", Data: json.RawMessage(` {} `)}, ""},
		{"bad type", NewEventInput{Type: "a b", Data: json.RawMessage(`{}`)}, "type"},
		{"empty type", NewEventInput{Type: "", Data: json.RawMessage(`{}`)}, "type"},
		{"array data", NewEventInput{Type: "a", Data: json.RawMessage(`[]`)}, "data"},
		{"null data", NewEventInput{Type: "a", Data: json.RawMessage(`null`)}, "data"},
		{"no data", NewEventInput{Type: "a"}, "data"},
		{"broken data", NewEventInput{Type: "a", Data: json.RawMessage(`{"a":`)}, "data"},
		{"trailing garbage", NewEventInput{Type: "a", Data: json.RawMessage(`{} {}`)}, "data"},
		{"long source", NewEventInput{Type: "a", Source: strings.Repeat("s", MaxSourceLength+1), Data: json.RawMessage(`{}`)}, "source"},
		{"long ordering key", NewEventInput{Type: "a", OrderingKey: strings.Repeat("k", MaxOrderingKeyLength+1), Data: json.RawMessage(`{}`)}, "ordering_key"},
		{"long idempotency key", NewEventInput{Type: "a", IdempotencyKey: strings.Repeat("k", MaxIdempotencyKeyLen+1), Data: json.RawMessage(`{}`)}, "Idempotency-Key"},
		{"NUL in type", NewEventInput{Type: "a\x00b", Data: json.RawMessage(`{}`)}, "type"},
		{"NUL in source", NewEventInput{Type: "a", Source: "a\x00b", Data: json.RawMessage(`{}`)}, "source"},
		{"invalid UTF-8 in source", NewEventInput{Type: "a", Source: "a\xffb", Data: json.RawMessage(`{}`)}, "source"},
		{"NUL in ordering key", NewEventInput{Type: "a", OrderingKey: "\x00", Data: json.RawMessage(`{}`)}, "ordering_key"},
		{"invalid UTF-8 in ordering key", NewEventInput{Type: "a", OrderingKey: "\xc3", Data: json.RawMessage(`{}`)}, "ordering_key"},
		{"NUL in idempotency key", NewEventInput{Type: "a", IdempotencyKey: "k\x00", Data: json.RawMessage(`{}`)}, "Idempotency-Key"},
		{"invalid UTF-8 in idempotency key", NewEventInput{Type: "a", IdempotencyKey: "k\x80", Data: json.RawMessage(`{}`)}, "Idempotency-Key"},
		{"escaped NUL in data", NewEventInput{Type: "a", Data: json.RawMessage(`{"k":"a\u0000b"}`)}, "data.k"},
		{"escaped NUL in checked data", NewEventInput{Type: "a", Data: json.RawMessage(`{"k":"a\u0000b"}`), DataChecked: true}, "data.k"},
		{"escaped NUL deep in data", NewEventInput{Type: "a", Data: json.RawMessage(`{"a":[1,"x",{"b":{"c":"\u0000"}}]}`)}, "data.a[2].b.c"},
		{"escaped NUL after an escaped backslash", NewEventInput{Type: "a", Data: json.RawMessage(`{"k":"\\\u0000"}`)}, "data.k"},
		{"escaped NUL in a member name", NewEventInput{Type: "a", Data: json.RawMessage(`{"ok":1,"a\u0000":1}`)}, `data["a\x00"]`},
		{"escaped NUL in a nested member name", NewEventInput{Type: "a", Data: json.RawMessage(`{"o":{"\u0000":1}}`)}, `data.o["\x00"]`},
		{"raw invalid UTF-8 in data", NewEventInput{Type: "a", Data: json.RawMessage("{\"k\":\"a\xffb\"}")}, "data.k"},
		{"raw invalid UTF-8 in a member name", NewEventInput{Type: "a", Data: json.RawMessage("{\"k\xff\":1}")}, "data[\"k\uFFFD\"]"},
		{"lone high surrogate in data", NewEventInput{Type: "a", Data: json.RawMessage(`{"k":"\ud800"}`)}, "data.k"},
		{"high surrogate before another escape", NewEventInput{Type: "a", Data: json.RawMessage(`{"k":"\ud800\u0041"}`)}, "data.k"},
		{"lone low surrogate in data", NewEventInput{Type: "a", Data: json.RawMessage(`{"k":["\udc00x"]}`)}, "data.k[0]"},
		{"surrogate pair", NewEventInput{Type: "a", Data: json.RawMessage(`{"k":"\ud83d\ude00"}`)}, ""},
		{"escaped backslash then u0000", NewEventInput{Type: "a", Data: json.RawMessage(`{"k":"\\u0000"}`)}, ""},
		{"escaped non-ASCII", NewEventInput{Type: "a", Data: json.RawMessage(`{"k":"\u00e9\u003c","\u00e9":"é"}`)}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ev, err := NewEvent(tt.in, now)
			if tt.field == "" {
				if err != nil {
					t.Fatal(err)
				}
				if !strings.HasPrefix(ev.ID, EventIDPrefix) || ev.Status != EventPending || !ev.CreatedAt.Equal(now.Truncate(time.Microsecond)) {
					t.Errorf("event = %+v", ev)
				}
				return
			}
			var invalid *ValidationError
			if !errors.As(err, &invalid) || invalid.Field != tt.field {
				t.Errorf("err = %v, want a ValidationError on %s", err, tt.field)
			}
		})
	}
}

// FuzzAcceptedDataHasOnlyTextStrings: whatever NewEvent accepts is valid
// UTF-8 whose strings decode without NUL and hold no lone surrogate
// escape, so any ordering key taken from it can be stored.
func FuzzAcceptedDataHasOnlyTextStrings(f *testing.F) {
	for _, seed := range []string{`{"k":"a\u0000b"}`, `{"\ud800":1}`, "{\"k\":\"\xff\"}", `{"k":"\\u0000"}`, `{"a":["\ud83d\ude00"]}`} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data string) {
		ev, err := NewEvent(NewEventInput{Type: "a", Data: json.RawMessage(data)}, time.Unix(0, 0))
		if err != nil {
			return
		}
		if !utf8.Valid(ev.Data) {
			t.Fatalf("accepted data %q is not UTF-8", data)
		}
		dec := json.NewDecoder(bytes.NewReader(ev.Data))
		for {
			tok, err := dec.Token()
			if err != nil {
				break
			}
			if s, ok := tok.(string); ok && (strings.ContainsRune(s, 0) || strings.ContainsRune(s, utf8.RuneError) && !strings.Contains(data, "\ufffd") && !strings.Contains(data, "\uFFFD") && !strings.Contains(data, "\uFFFd") && !strings.ContainsRune(data, utf8.RuneError)) {
				t.Fatalf("accepted data %q holds the string %q", data, s)
			}
		}
	})
}

func TestWebhookPayloadIsTheSpecEnvelope(t *testing.T) {
	t.Parallel()
	ev, err := NewEvent(NewEventInput{Type: "order.created", Source: "shop", Data: json.RawMessage(`{ "z": 1, "a": [true] }`)},
		time.Date(2026, 5, 6, 7, 8, 9, 500000000, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":"` + ev.ID + `","type":"order.created","source":"shop","timestamp":"2026-05-06T07:08:09.5Z","data":{"z":1,"a":[true]}}`
	if got := string(ev.WebhookPayload()); got != want {
		t.Errorf("payload =\n%s\nwant\n%s", got, want)
	}
}

func TestWebhookPayloadCarriesDataAsStored(t *testing.T) {
	t.Parallel()
	ev, err := NewEvent(NewEventInput{Type: "a.b", Source: `<"shop" & co>`, Data: json.RawMessage(`{"html":"<b>&amp;</b>","é":"\u00e9","n":1.50}`)},
		time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":"` + ev.ID + `","type":"a.b","source":"\u003c\"shop\" \u0026 co\u003e","timestamp":"2026-05-06T07:08:09Z",` +
		`"data":{"html":"<b>&amp;</b>","é":"\u00e9","n":1.50}}`
	if got := string(ev.WebhookPayload()); got != want {
		t.Errorf("payload =\n%s\nwant\n%s", got, want)
	}
}

func FuzzNewEventData(f *testing.F) {
	for _, seed := range []string{`{}`, `{"a":1}`, `[]`, `"x"`, `{"a":`, ` {"b":[1,{"c":null}]} `, "{\"\\u0000\":1}"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data string) {
		ev, err := NewEvent(NewEventInput{Type: "a", Data: json.RawMessage(data)}, time.Unix(0, 0))
		if err != nil {
			return
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(ev.Data, &obj); err != nil {
			t.Fatalf("accepted data %q is not an object: %v", data, err)
		}
		var payload struct {
			ID, Type, Source string
			Data             json.RawMessage
		}
		if err := json.Unmarshal(ev.WebhookPayload(), &payload); err != nil {
			t.Fatalf("payload of %q is not JSON: %v", data, err)
		}
		if payload.ID != ev.ID || payload.Type != ev.Type || string(payload.Data) != string(ev.Data) {
			t.Fatalf("payload of %q = %+v, want the event's fields and its data as stored", data, payload)
		}
	})
}

func TestNewEventKeepsCheckedCompactData(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
	tests := []struct {
		name, data, want string
	}{
		{"compact", `{"a":[1,{"b":"x y"}],"c":"\"{ }\""}`, `{"a":[1,{"b":"x y"}],"c":"\"{ }\""}`},
		{"spaces outside strings", `{ "a": [1, 2] }`, `{"a":[1,2]}`},
		{"newline between members", "{\"a\":1,\n\"b\":2}", `{"a":1,"b":2}`},
		{"surrounding space", " {\"a\":1}\n", `{"a":1}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			checked, err := NewEvent(NewEventInput{Type: "a", Data: json.RawMessage(tt.data), DataChecked: true}, now)
			if err != nil {
				t.Fatal(err)
			}
			unchecked, err := NewEvent(NewEventInput{Type: "a", Data: json.RawMessage(tt.data)}, now)
			if err != nil {
				t.Fatal(err)
			}
			if string(checked.Data) != tt.want || string(unchecked.Data) != tt.want {
				t.Errorf("data checked %s, unchecked %s, want %s", checked.Data, unchecked.Data, tt.want)
			}
		})
	}
}

func TestNewEventStillRefusesCheckedDataThatIsNoObject(t *testing.T) {
	t.Parallel()
	for _, data := range []string{``, `[1]`, `"x"`, ` `} {
		_, err := NewEvent(NewEventInput{Type: "a", Data: json.RawMessage(data), DataChecked: true}, time.Unix(0, 0))
		var invalid *ValidationError
		if !errors.As(err, &invalid) || invalid.Field != "data" {
			t.Errorf("data %q: err = %v, want a ValidationError on data", data, err)
		}
	}
}

func TestIsCompactJSON(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want bool
	}{
		{`{}`, true},
		{`{"a":"b c"}`, true},
		{`{"a":"\" "}`, true},
		{`{"a":"\\"}`, true},
		{`{"a": 1}`, false},
		{`{"a":"\\" }`, false},
		{"{\"a\":1}\n", false},
		{"{\t}", false},
		{"{\r}", false},
		{``, true},
		{`{"a":"\\\" "}`, true},  // an escaped backslash, then an escaped quote
		{`{"a":"\\\\" }`, false}, // two escaped backslashes end the string
		{`"\`, true},             // unterminated: not well-formed
		{`{"a":"x"} `, false},
		{`{"a":"a string past sixteen bytes \" ends \\"} `, false}, // quotes found by IndexByte
		{`{"a":"a string past sixteen bytes \\\" goes on"}`, true},
	}
	for _, tt := range tests {
		if got := IsCompactJSON([]byte(tt.in)); got != tt.want {
			t.Errorf("IsCompactJSON(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

// isCompactJSONByByte is IsCompactJSON as first written, a byte at a time:
// the reference the fuzz test holds the faster one to, well-formed or not.
func isCompactJSONByByte(d []byte) bool {
	inString := false
	for i := 0; i < len(d); i++ {
		c := d[i]
		switch {
		case inString:
			switch c {
			case '\\':
				i++
			case '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			return false
		}
	}
	return true
}

// FuzzIsCompactJSON checks IsCompactJSON against the byte-at-a-time
// reference on every input, and against json.Compact on every well-formed
// one: it is true exactly when compacting changes nothing.
func FuzzIsCompactJSON(f *testing.F) {
	for _, seed := range []string{`{}`, `{"a": 1}`, `{"a":"\" "}`, `[1, "\\", {"b":null}]`, "{\"a\":\n1}", `"x y"`,
		`{"a":"\\\" "} `, `"\`, `{"a":"b" , "c":1}`, "\"\\\\\\\"\" "} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data string) {
		if got, want := IsCompactJSON([]byte(data)), isCompactJSONByByte([]byte(data)); got != want {
			t.Fatalf("IsCompactJSON(%q) = %v, the byte-at-a-time reference %v", data, got, want)
		}
		var compact bytes.Buffer
		if json.Compact(&compact, []byte(data)) != nil {
			return
		}
		if got, want := IsCompactJSON([]byte(data)), compact.String() == data; got != want {
			t.Fatalf("IsCompactJSON(%q) = %v, but json.Compact gives %q", data, got, compact.String())
		}
	})
}

// BenchmarkIsCompactJSON measures IsCompactJSON and the byte-at-a-time
// reference on two 1 KiB objects: the load tool's (one long string) and
// one of many short fields, as a typical event's data.
//
//	go test -run '^$' -bench BenchmarkIsCompactJSON ./domain/
func BenchmarkIsCompactJSON(b *testing.B) {
	long := []byte(`{"seq":1234567,"pad":"` + strings.Repeat("abcdefghijklmnopqrstuvwxyz", 39) + `"}`)
	var fields strings.Builder
	fields.WriteString(`{"id":"cus_123"`)
	for i := 0; fields.Len() < 1000; i++ {
		fmt.Fprintf(&fields, `,"field_%d":"value %d","n_%d":%d,"ok_%d":true`, i, i, i, i*7, i)
	}
	fields.WriteString(`}`)
	for _, data := range []struct {
		name string
		d    []byte
	}{{"one-string", long}, {"many-fields", []byte(fields.String())}} {
		for _, f := range []struct {
			name string
			fn   func([]byte) bool
		}{{"IsCompactJSON", IsCompactJSON}, {"byte-at-a-time", isCompactJSONByByte}} {
			b.Run(data.name+"/"+f.name, func(b *testing.B) {
				if !f.fn(data.d) {
					b.Fatal("not compact")
				}
				b.SetBytes(int64(len(data.d)))
				for b.Loop() {
					f.fn(data.d)
				}
			})
		}
	}
}
