package storetest

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// BacklogStore is a store that counts its backlog.
type BacklogStore interface {
	ports.Store
	ports.Backlog
}

// RunBacklog checks ports.Backlog: undelivered deliveries counted by status.
func RunBacklog(t *testing.T, newStore func(t *testing.T) BacklogStore) {
	t.Run("UndeliveredCounts", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		s := newStore(t)
		now := time.Now().UTC()
		sub, err := domain.NewSubscription(domain.NewSubscriptionInput{URL: "https://example.com", EventTypes: []string{"*"}}, now)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.CreateSubscription(ctx, sub); err != nil {
			t.Fatal(err)
		}
		var fanouts []ports.FanOut
		for range 4 {
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
		settle := func(id string, status domain.DeliveryStatus, code int) {
			c, err := s.ClaimDelivery(ctx, id, now, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			d := c.Delivery
			d.Status, d.Attempts = status, 1
			if _, err := s.RecordAttempt(ctx, d, domain.Attempt{DeliveryID: d.ID, Number: 1, StatusCode: code, CreatedAt: now}); err != nil {
				t.Fatal(err)
			}
		}
		settle(ids[0], domain.DeliveryDead, 400)
		settle(ids[1], domain.DeliveryDelivered, 200)
		if _, err := s.ClaimDelivery(ctx, ids[2], now, time.Second); err != nil {
			t.Fatal(err)
		}
		counts, err := s.UndeliveredCounts(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := map[domain.DeliveryStatus]int64{domain.DeliveryPending: 1, domain.DeliveryDelivering: 1, domain.DeliveryDead: 1}
		for status, n := range want {
			if counts[status] != n {
				t.Errorf("%s = %d, want %d (counts %v)", status, counts[status], n, counts)
			}
		}
		if counts[domain.DeliveryDelivered] != 0 {
			t.Errorf("delivered deliveries counted: %v", counts)
		}
	})
}
