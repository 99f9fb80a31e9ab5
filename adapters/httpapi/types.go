package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/danielgtaylor/huma/v2"
)

// Duration is a Go duration string in JSON ("1.5s", "5m"), parsed strictly.
type Duration time.Duration

// MarshalText renders d as a Go duration string.
func (d Duration) MarshalText() ([]byte, error) {
	return []byte(time.Duration(d).String()), nil
}

// UnmarshalText accepts only positive Go duration strings.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("%q is not a duration such as \"1.5s\" or \"5m\"", b)
	}
	if v <= 0 {
		return fmt.Errorf("duration must be positive, got %q", b)
	}
	*d = Duration(v)
	return nil
}

// Schema documents Duration as a pattern-checked string, so a bad duration
// is refused by validation with its location.
func (Duration) Schema(huma.Registry) *huma.Schema {
	return &huma.Schema{
		Type:        huma.TypeString,
		Pattern:     `^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`,
		Description: "A Go duration such as \"1.5s\", \"5m\" or \"2h30m\".",
		Examples:    []any{"10s"},
	}
}

// EventData is an event's data: any JSON object, kept byte for byte.
type EventData json.RawMessage

// UnmarshalJSON keeps the raw bytes.
func (d *EventData) UnmarshalJSON(b []byte) error {
	*d = append((*d)[:0], b...)
	return nil
}

// MarshalJSON writes the raw bytes.
func (d EventData) MarshalJSON() ([]byte, error) {
	if len(bytes.TrimSpace(d)) == 0 {
		return []byte("{}"), nil
	}
	return d, nil
}

// Schema documents EventData as a free-form object.
func (EventData) Schema(huma.Registry) *huma.Schema {
	return &huma.Schema{
		Type:                 huma.TypeObject,
		AdditionalProperties: true,
		Description:          "The event's payload: any JSON object.",
		Examples:             []any{map[string]any{"order_id": "ord_123", "amount": 4200}},
	}
}

// List is a page of items with the cursor of the next page.
type List[T any] struct {
	Data []T `json:"data"`
	// NextCursor is null on the last page.
	NextCursor *string `json:"next_cursor" doc:"Pass as cursor to get the next page; null on the last page."`
}
