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
	Deliveries ports.DeliveryStore
}

// EventView is an event with the state of each of its deliveries.
type EventView struct {
	Event      domain.Event
	Deliveries []domain.Delivery
}

// Get returns event id with its deliveries, or domain.ErrNotFound.
func (uc *Events) Get(ctx context.Context, id string) (EventView, error) {
	ev, err := uc.Events.GetEvent(ctx, id)
	if err != nil {
		return EventView{}, err
	}
	ds, err := uc.Deliveries.EventDeliveries(ctx, id)
	if err != nil {
		return EventView{}, fmt.Errorf("load deliveries of event %s: %w", id, err)
	}
	return EventView{Event: ev, Deliveries: ds}, nil
}

// Attempts returns every attempt of every delivery of event id, or
// domain.ErrNotFound when the event does not exist.
func (uc *Events) Attempts(ctx context.Context, id string) ([]domain.Attempt, error) {
	if _, err := uc.Events.GetEvent(ctx, id); err != nil {
		return nil, err
	}
	return uc.Deliveries.EventAttempts(ctx, id)
}
