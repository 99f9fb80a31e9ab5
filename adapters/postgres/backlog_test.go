package postgres_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/dispatch-webhooks/dispatch/adapters/postgres"
	"github.com/dispatch-webhooks/dispatch/adapters/postgres/pgtest"
	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

func TestUndeliveredCountsInPostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := postgres.New(pgtest.NewPool(t))
	now := time.Now().UTC()
	sub, err := domain.NewSubscription(domain.NewSubscriptionInput{URL: "https://example.com", EventTypes: []string{"*"}}, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateSubscription(ctx, sub); err != nil {
		t.Fatal(err)
	}
	var fanouts []ports.FanOut
	for range 3 {
		ev, _ := domain.NewEvent(domain.NewEventInput{Type: "a", Data: json.RawMessage(`{}`)}, now)
		if _, _, err := s.CreateEvent(ctx, ev, now.Add(-time.Hour)); err != nil {
			t.Fatal(err)
		}
		fanouts = append(fanouts, ports.FanOut{EventID: ev.ID, Deliveries: []domain.Delivery{domain.NewDelivery(ev, sub, now)}})
	}
	ids, err := s.CreateDeliveries(ctx, fanouts)
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.ClaimDelivery(ctx, ids[0], now, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	dead := c.Delivery
	dead.Status = domain.DeliveryDead
	if _, err := s.RecordAttempt(ctx, dead, domain.Attempt{DeliveryID: dead.ID, Number: 1, StatusCode: 400, CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	counts, err := s.UndeliveredCounts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if counts[domain.DeliveryPending] != 2 || counts[domain.DeliveryDead] != 1 || counts[domain.DeliveryDelivered] != 0 {
		t.Errorf("counts = %v, want 2 pending and 1 dead", counts)
	}
}
