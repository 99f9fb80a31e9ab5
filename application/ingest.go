package application

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// DefaultIdempotencyWindow is how long an idempotency key keeps returning
// the event it first created.
const DefaultIdempotencyWindow = 24 * time.Hour

// DefaultMaxInlineDeliveries is how many deliveries an event may have to be
// fanned out inline, in the ingest transaction.
const DefaultMaxInlineDeliveries = 16

// Ingest accepts events from producers.
type Ingest struct {
	Events ports.EventStore
	Queue  ports.Queue
	Clock  ports.Clock
	// IdempotencyWindow is how long a key is remembered.
	IdempotencyWindow time.Duration
	// MaxInlineDeliveries is the most deliveries an event without an
	// idempotency key may have for ingest to fan it out in its own
	// transaction (SPEC §2) and append the deliveries rather than the
	// event; one with more goes through the fan-out stage, so a publish
	// stays fast. 0 means DefaultMaxInlineDeliveries, negative never.
	MaxInlineDeliveries int
	// VisibilityTimeout is the scheduler's (see Schedule); deliveries
	// fanned out inline are reserved for as long (see entries.go).
	VisibilityTimeout time.Duration
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

// Publish validates the event and commits it, then appends it to the event
// stream, or, when it was fanned out inline, its deliveries to the delivery
// stream. When Publish returns without error the event is durable.
func (uc *Ingest) Publish(ctx context.Context, in domain.NewEventInput) (Published, error) {
	now := uc.Clock.Now()
	event, err := domain.NewEvent(in, now)
	if err != nil {
		return Published{}, err
	}
	if limit := cmp.Or(uc.MaxInlineDeliveries, DefaultMaxInlineDeliveries); event.IdempotencyKey == "" && limit > 0 {
		return uc.publishFannedOut(ctx, event, limit)
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
	if err := uc.Queue.Publish(ctx, ports.EventStream, eventEntry(stored.ID)); err != nil {
		out.EnqueueErr = fmt.Errorf("append event %s to stream: %w", stored.ID, err)
	}
	return out, nil
}

// publishFannedOut commits event together with its deliveries when it has
// at most limit, and appends what is left to do: the deliveries, or the
// event for the fan-out stage. A lost append is made up by the scheduler
// (the due scan, or the outbox sweep).
func (uc *Ingest) publishFannedOut(ctx context.Context, event domain.Event, limit int) (Published, error) {
	// made holds what every call of inline made: the store may call it
	// again, and its entries are for the deliveries it stored.
	var made []domain.Delivery
	inline := func(e domain.Event, active *domain.SubscriptionIndex) ([]domain.Delivery, bool) {
		ds, ok := deliveriesOf(e, active, e.CreatedAt, limit, visibilityTimeout(uc.VisibilityTimeout))
		made = append(made, ds...)
		return ds, ok
	}
	deliveries, fannedOut, err := uc.Events.CreateEventFannedOut(ctx, event, inline)
	if err != nil {
		return Published{}, fmt.Errorf("store event: %w", err)
	}
	out := Published{Event: event}
	switch {
	case fannedOut && len(deliveries) == 0:
		out.Event.Status = domain.EventDelivered // nothing to do
	case !fannedOut:
		if err := uc.Queue.Publish(ctx, ports.EventStream, eventEntry(event.ID)); err != nil {
			out.EnqueueErr = fmt.Errorf("append event %s to stream: %w", event.ID, err)
		}
	case len(deliveries) > 0:
		if err := uc.Queue.Publish(ctx, ports.DeliveryStream, freshEntries(stored(made, deliveries))...); err != nil {
			out.EnqueueErr = fmt.Errorf("append %d deliveries of event %s to stream: %w", len(deliveries), event.ID, err)
		}
	}
	return out, nil
}
