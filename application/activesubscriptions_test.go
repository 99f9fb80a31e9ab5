package application_test

import (
	"context"
	"testing"

	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// TestFanOutSeesEveryChangeMadeBeforeItsBatch checks that the fan-out
// stage, which matches events against the store's copy of the active
// subscriptions (SubscriptionStore.MatchActive) instead of loading them
// all for every batch, still sees every change made before a batch: a
// subscription changed to match, one created, one deleted, one paused.
func TestFanOutSeesEveryChangeMadeBeforeItsBatch(t *testing.T) {
	t.Parallel()
	const n = 500
	p := newPipeline()
	ctx := context.Background()
	var subs []domain.Subscription
	for range n {
		subs = append(subs, p.subscribe(t, "elsewhere.*"))
	}
	deliveries := func(e domain.Event) map[string]bool {
		t.Helper()
		if err := p.fanout.Handle(ctx, []string{e.ID}); err != nil {
			t.Fatal(err)
		}
		view, err := p.events.Get(ctx, e.ID, ports.Page{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		to := map[string]bool{}
		for _, d := range view.Deliveries {
			to[d.SubscriptionID] = true
		}
		return to
	}
	if got := deliveries(p.publish(t, "order.created", "")); len(got) != 0 {
		t.Fatalf("deliveries to %v, want none", got)
	}

	if _, err := p.store.UpdateSubscription(ctx, subs[n/2].ID, func(s *domain.Subscription) error {
		s.EventTypes = []string{"order.*"}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	created := p.subscribe(t, "order.created")
	if got := deliveries(p.publish(t, "order.created", "")); len(got) != 2 || !got[subs[n/2].ID] || !got[created.ID] {
		t.Errorf("deliveries to %v, want the changed and the created subscription", got)
	}

	if _, err := p.store.DeleteSubscription(ctx, created.ID, 500); err != nil {
		t.Fatal(err)
	}
	if _, err := p.store.UpdateSubscription(ctx, subs[n/2].ID, func(s *domain.Subscription) error {
		s.Active = false
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got := deliveries(p.publish(t, "order.created", "")); len(got) != 0 {
		t.Errorf("deliveries to %v after the deletion and the pause, want none", got)
	}
}
