package application_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dispatch-webhooks/dispatch/adapters/memory"
	"github.com/dispatch-webhooks/dispatch/application"
	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// batchWatch is a memory store that records the limit of every batch the
// use cases ask for.
type batchWatch struct {
	*memory.Store
	mu     sync.Mutex
	limits []int
}

func (b *batchWatch) RecoverDeliveries(ctx context.Context, sub string, since, now time.Time, p ports.Page) (ports.Recovered, error) {
	b.mu.Lock()
	b.limits = append(b.limits, p.Limit)
	b.mu.Unlock()
	return b.Store.RecoverDeliveries(ctx, sub, since, now, p)
}

func (b *batchWatch) DeleteSubscription(ctx context.Context, id string, batch int) (bool, error) {
	b.mu.Lock()
	b.limits = append(b.limits, batch)
	b.mu.Unlock()
	return b.Store.DeleteSubscription(ctx, id, batch)
}

// settled fans one new event out to sub and settles its delivery with one
// attempt in status, and returns the delivery.
func settled(t *testing.T, store ports.Store, sub domain.Subscription, status domain.DeliveryStatus, now time.Time) domain.Delivery {
	t.Helper()
	ctx := context.Background()
	e := domain.Event{ID: domain.MustNewID(domain.EventIDPrefix, now), Type: "a", Source: "s", Data: []byte(`{}`), CreatedAt: now}
	if _, _, err := store.CreateEvent(ctx, e, now.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	d := domain.Delivery{
		ID: domain.MustNewID(domain.DeliveryIDPrefix, now), EventID: e.ID, SubscriptionID: sub.ID,
		Status: domain.DeliveryPending, NextAttemptAt: now, CreatedAt: now, UpdatedAt: now,
	}
	if _, err := store.CreateDeliveries(ctx, []ports.FanOut{{EventID: e.ID, Deliveries: []domain.Delivery{d}}}); err != nil {
		t.Fatal(err)
	}
	claimed, err := store.ClaimDelivery(ctx, d.ID, now, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	d = claimed.Delivery
	d.Attempts, d.Status, d.LastStatusCode, d.UpdatedAt = 1, status, 400, now
	if _, err := store.RecordAttempt(ctx, d, domain.Attempt{DeliveryID: d.ID, Number: 1, StatusCode: 400, CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestRecoverWorksInBoundedBatches: recover made every dead delivery of
// the subscription due again in one statement, however many there were.
func TestRecoverWorksInBoundedBatches(t *testing.T) {
	t.Parallel()
	store := &batchWatch{Store: memory.NewStore()}
	clock := newClock()
	queue := newRecordingQueue()
	subs := &application.Subscriptions{Store: store, Clock: clock}
	sub, err := subs.Create(context.Background(), domain.NewSubscriptionInput{URL: "https://example.com/hook", EventTypes: []string{"a"}})
	if err != nil {
		t.Fatal(err)
	}
	var dead []string
	for i := range 7 {
		status := domain.DeliveryDead
		if i == 3 {
			status = domain.DeliveryDelivered
		}
		d := settled(t, store, sub, status, clock.Now())
		if status == domain.DeliveryDead {
			dead = append(dead, d.ID)
		}
	}
	uc := &application.Deliveries{Deliveries: store, Subscriptions: store, Queue: queue, Clock: clock, RecoverBatch: 2}

	n, err := uc.Recover(context.Background(), sub.ID, clock.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if n != len(dead) {
		t.Errorf("recovered %d, want every dead delivery (%d)", n, len(dead))
	}
	if len(store.limits) < 3 || slices.ContainsFunc(store.limits, func(l int) bool { return l != 2 }) {
		t.Errorf("batch limits %v, want at least 3 batches of 2", store.limits)
	}
	queued := queue.bodies(ports.DeliveryStream)
	slices.Sort(queued)
	if !slices.Equal(queued, dead) {
		t.Errorf("queued %v, want %v", queued, dead)
	}
	for _, id := range dead {
		d, err := store.GetDelivery(context.Background(), id)
		if err != nil || d.Status != domain.DeliveryRetrying {
			t.Errorf("delivery %s: %v %v, want retrying", id, d.Status, err)
		}
	}
}

// TestDeleteWorksInBoundedBatches: deleting a subscription removed all its
// deliveries and attempts in one transaction, however many there were.
func TestDeleteWorksInBoundedBatches(t *testing.T) {
	t.Parallel()
	store := &batchWatch{Store: memory.NewStore()}
	clock := newClock()
	subs := &application.Subscriptions{Store: store, Clock: clock, DeleteBatch: 2}
	sub, err := subs.Create(context.Background(), domain.NewSubscriptionInput{URL: "https://example.com/hook", EventTypes: []string{"a"}})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for range 5 {
		ids = append(ids, settled(t, store, sub, domain.DeliveryDead, clock.Now()).ID)
	}

	if err := subs.Delete(context.Background(), sub.ID); err != nil {
		t.Fatal(err)
	}
	if len(store.limits) < 3 || slices.ContainsFunc(store.limits, func(l int) bool { return l != 2 }) {
		t.Errorf("batch limits %v, want at least 3 batches of 2", store.limits)
	}
	for _, id := range ids {
		if _, err := store.GetDelivery(context.Background(), id); !errors.Is(err, domain.ErrNotFound) {
			t.Errorf("delivery %s: %v, want deleted", id, err)
		}
	}
	if err := subs.Delete(context.Background(), sub.ID); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("second delete: %v, want not found", err)
	}
}

// TestSchedulerFinishesAnInterruptedDeletion: a deletion whose process
// died after its first batch is finished by the scheduler's ticks, without
// another request.
func TestSchedulerFinishesAnInterruptedDeletion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := memory.NewStore()
	clock := newClock()
	subs := &application.Subscriptions{Store: store, Clock: clock}
	sub, err := subs.Create(ctx, domain.NewSubscriptionInput{URL: "https://example.com/hook", EventTypes: []string{"a"}})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for range 5 {
		ids = append(ids, settled(t, store, sub, domain.DeliveryDead, clock.Now()).ID)
	}
	if done, err := store.DeleteSubscription(ctx, sub.ID, 2); err != nil || done {
		t.Fatalf("first batch: done %v, err %v; want an unfinished deletion", done, err)
	}

	s := &application.Schedule{Events: store, Deliveries: store, Subscriptions: store, DeleteBatch: 2,
		Queue: idleStreams{newRecordingQueue()}, Clock: clock, Consumer: "s"}
	batches := 0
	for ticks := 0; ; ticks++ {
		if ticks == 10 {
			t.Fatal("10 ticks did not finish the deletion")
		}
		unfinished, err := store.UnfinishedDeletions(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(unfinished) == 0 {
			break
		}
		swept, err := s.Tick(ctx)
		if err != nil {
			t.Fatal(err)
		}
		batches += swept.DeletionBatches
	}
	if batches < 2 {
		t.Errorf("%d batches swept, want at least 2 for the 3 deliveries left", batches)
	}
	for _, id := range ids {
		if _, err := store.GetDelivery(ctx, id); !errors.Is(err, domain.ErrNotFound) {
			t.Errorf("delivery %s: %v, want deleted", id, err)
		}
	}
	if err := subs.Delete(ctx, sub.ID); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("delete after the scheduler finished: %v, want not found", err)
	}
}
