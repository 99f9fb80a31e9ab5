package loadtest

import "testing"

func TestEventIDReadsTheIDMember(t *testing.T) {
	t.Parallel()
	tests := []struct {
		answer, want string
		ok           bool
	}{
		{`{"$schema":"http://x/schemas/Event.json","id":"evt_1","data":{"id":"no"}}`, "evt_1", true},
		{`{"data":{"id":"nested"},"id":"evt_2"}`, "evt_2", true},
		{`{"id":"evt_\u0033"}`, "evt_3", true},
		{`{"$schema":"http://x/a\"b","id":"evt_5"}`, "evt_5", true},
		{`{"$schema":"http://x","data":{"id":"no"},"id":"evt_6"}`, "evt_6", true},
		{`{"id":""}`, "", true},
		{`{"data":{"id":"nested"}}`, "", false},
		{`["id","evt_4"]`, "", false},
		{`{"id":4}`, "", false},
		{`{"a":`, "", false},
		{``, "", false},
	}
	for _, tt := range tests {
		got, err := eventID([]byte(tt.answer))
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("eventID(%s) = %q, %v; want %q, ok %v", tt.answer, got, err, tt.want, tt.ok)
		}
	}
}
