package domain

import (
	"bytes"
	"encoding/json"
	"time"
)

// EventStatus is the rolled-up state of an event's deliveries.
type EventStatus string

// Event statuses. An event is pending until every delivery is terminal, then
// delivered, or failed if any delivery is dead.
const (
	EventPending   EventStatus = "pending"
	EventDelivered EventStatus = "delivered"
	EventFailed    EventStatus = "failed"
)

// Limits on event fields.
const (
	MaxSourceLength      = 256
	MaxOrderingKeyLength = 256
	MaxIdempotencyKeyLen = 256
)

// Event is something a producer published. Data is a JSON object; it is
// stored and delivered byte for byte as received (after compaction).
type Event struct {
	ID             string
	Type           string
	Source         string
	Data           json.RawMessage
	OrderingKey    string
	IdempotencyKey string
	Status         EventStatus
	CreatedAt      time.Time
}

// NewEventInput is what a producer supplies to publish an event.
type NewEventInput struct {
	Type           string
	Source         string
	Data           json.RawMessage
	OrderingKey    string
	IdempotencyKey string
}

// NewEvent validates in and returns a pending event with a fresh id.
func NewEvent(in NewEventInput, now time.Time) (Event, error) {
	if err := ValidateEventType(in.Type); err != nil {
		return Event{}, &ValidationError{Field: "type", Message: err.Error()}
	}
	if len(in.Source) > MaxSourceLength {
		return Event{}, invalid("source", "must be at most %d bytes, got %d", MaxSourceLength, len(in.Source))
	}
	if len(in.OrderingKey) > MaxOrderingKeyLength {
		return Event{}, invalid("ordering_key", "must be at most %d bytes, got %d", MaxOrderingKeyLength, len(in.OrderingKey))
	}
	if len(in.IdempotencyKey) > MaxIdempotencyKeyLen {
		return Event{}, invalid("Idempotency-Key", "must be at most %d bytes, got %d", MaxIdempotencyKeyLen, len(in.IdempotencyKey))
	}
	data := bytes.TrimSpace(in.Data)
	if len(data) == 0 || data[0] != '{' {
		return Event{}, invalid("data", "must be a JSON object")
	}
	// Compact validates as it goes: one pass over the payload, not two.
	var compact bytes.Buffer
	compact.Grow(len(data))
	if err := json.Compact(&compact, data); err != nil {
		return Event{}, invalid("data", "must be a JSON object: %v", err)
	}
	now = now.UTC().Truncate(time.Microsecond)
	return Event{
		ID:             MustNewID(EventIDPrefix, now),
		Type:           in.Type,
		Source:         in.Source,
		Data:           compact.Bytes(),
		OrderingKey:    in.OrderingKey,
		IdempotencyKey: in.IdempotencyKey,
		Status:         EventPending,
		CreatedAt:      now,
	}, nil
}

// WebhookPayload is the body of every webhook request: SPEC §3's
// {"id","type","source","timestamp","data"} with timestamp in RFC 3339.
func (e Event) WebhookPayload() []byte {
	body, err := json.Marshal(struct {
		ID        string          `json:"id"`
		Type      string          `json:"type"`
		Source    string          `json:"source"`
		Timestamp string          `json:"timestamp"`
		Data      json.RawMessage `json:"data"`
	}{e.ID, e.Type, e.Source, e.CreatedAt.UTC().Format(time.RFC3339Nano), e.Data})
	if err != nil {
		// Data was validated as JSON when the event was created; a failure
		// here means a store handed back corrupted data.
		panic("domain: event " + e.ID + " has invalid data: " + err.Error())
	}
	return body
}
