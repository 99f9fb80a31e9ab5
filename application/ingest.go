package application

import (
	"context"
	"fmt"
	"time"

	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// DefaultIdempotencyWindow is how long an idempotency key keeps returning
// the event it first created.
const DefaultIdempotencyWindow = 24 * time.Hour

// Ingest accepts events from producers.
type Ingest struct {
	Events ports.EventStore
	Queue  ports.Queue
	Clock  ports.Clock
	// IdempotencyWindow is how long a key is remembered.
	IdempotencyWindow time.Duration
}

// Published is the outcome of Publish.
type Published struct {
	Event domain.Event
	// Replayed is true when the idempotency key matched an earlier event,
	// which is returned unchanged.
	Replayed bool
	// EnqueueErr is set when the event is durable but could not be appended
	// to the event stream; the scheduler's outbox sweep enqueues it later.
	EnqueueErr error
}

// Publish validates the event, commits it, then appends it to the event
// stream. When Publish returns without error the event is durable.
func (uc *Ingest) Publish(ctx context.Context, in domain.NewEventInput) (Published, error) {
	now := uc.Clock.Now()
	event, err := domain.NewEvent(in, now)
	if err != nil {
		return Published{}, err
	}
	window := uc.IdempotencyWindow
	if window == 0 {
		window = DefaultIdempotencyWindow
	}
	stored, created, err := uc.Events.CreateEvent(ctx, event, now.Add(-window))
	if err != nil {
		return Published{}, fmt.Errorf("store event: %w", err)
	}
	if !created {
		return Published{Event: stored, Replayed: true}, nil
	}
	out := Published{Event: stored}
	if err := uc.Queue.Publish(ctx, ports.EventStream, stored.ID); err != nil {
		out.EnqueueErr = fmt.Errorf("append event %s to stream: %w", stored.ID, err)
	}
	return out, nil
}
