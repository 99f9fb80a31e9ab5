package application

import (
	"context"
	"fmt"

	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// Events is the read side of events: what happened to each one.
type Events struct {
	Events     ports.EventStore
	Deliveries ports.DeliveryRecords
}

// EventView is an event with one page of its deliveries.
type EventView struct {
	Event      domain.Event
	Deliveries []domain.Delivery
}

// Get returns event id with the page p of its deliveries (in subscription
// id order; p.After is a subscription id), or domain.ErrNotFound. The
// event's status covers all its deliveries, not only the page.
func (uc *Events) Get(ctx context.Context, id string, p ports.Page) (EventView, error) {
	ev, err := uc.Events.GetEvent(ctx, id)
	if err != nil {
		return EventView{}, err
	}
	ds, err := uc.Deliveries.EventDeliveries(ctx, id, p)
	if err != nil {
		return EventView{}, fmt.Errorf("load deliveries of event %s: %w", id, err)
	}
	return EventView{Event: ev, Deliveries: ds}, nil
}

// Attempts returns the page p of the attempts of event id's deliveries,
// or domain.ErrNotFound when the event does not exist.
func (uc *Events) Attempts(ctx context.Context, id string, p ports.AttemptPage) ([]domain.Attempt, error) {
	if _, err := uc.Events.GetEvent(ctx, id); err != nil {
		return nil, err
	}
	return uc.Deliveries.EventAttempts(ctx, id, p)
}
