package application

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// Deliveries is the dead-letter side: look deliveries up, and send dead ones
// again, one at a time or a subscription's all at once.
type Deliveries struct {
	Deliveries    ports.DeliveryRecords
	Subscriptions ports.SubscriptionStore
	Queue         ports.Queue
	Clock         ports.Clock
	// RecoverBatch is how many dead deliveries Recover takes per
	// transaction; DefaultRecoverBatch when zero.
	RecoverBatch int
}

// DefaultRecoverBatch is Deliveries.RecoverBatch's default: a batch short
// enough to hold its locks for milliseconds.
const DefaultRecoverBatch = 500

// DeliveryView is a delivery with its attempts.
type DeliveryView struct {
	Delivery domain.Delivery
	Attempts []domain.Attempt
}

// List returns one page of deliveries matching f, in creation order.
func (uc *Deliveries) List(ctx context.Context, f ports.DeliveryFilter, p ports.Page) ([]domain.Delivery, error) {
	return uc.Deliveries.ListDeliveries(ctx, f, p)
}

// Get returns delivery id with its attempts, or domain.ErrNotFound.
func (uc *Deliveries) Get(ctx context.Context, id string) (DeliveryView, error) {
	d, err := uc.Deliveries.GetDelivery(ctx, id)
	if err != nil {
		return DeliveryView{}, err
	}
	attempts, err := uc.Deliveries.DeliveryAttempts(ctx, id)
	if err != nil {
		return DeliveryView{}, fmt.Errorf("load attempts of delivery %s: %w", id, err)
	}
	return DeliveryView{Delivery: d, Attempts: attempts}, nil
}

// Retry makes a dead or retrying delivery due now and enqueues it. It
// returns domain.ErrConflict for a delivery that is pending, being
// delivered or delivered. When the append fails the delivery is still due
// in PostgreSQL and the scheduler enqueues it.
func (uc *Deliveries) Retry(ctx context.Context, id string) (domain.Delivery, error) {
	d, err := uc.Deliveries.RetryDelivery(ctx, id, uc.Clock.Now())
	if errors.Is(err, domain.ErrConflict) {
		return domain.Delivery{}, fmt.Errorf("%w: delivery %s is %s; only dead or retrying deliveries can be retried", err, id, uc.status(ctx, id))
	}
	if err != nil {
		return domain.Delivery{}, err
	}
	_ = uc.Queue.Publish(ctx, ports.DeliveryStream, plainEntries(d.SubscriptionID, d.ID)...) // the scheduler's scan is the fallback
	return d, nil
}

// Recover re-delivers every delivery of subscription id that died at or
// after since, and returns how many. It works through them in batches of
// RecoverBatch (DefaultRecoverBatch when zero), each one short
// transaction, enqueuing each batch as it goes. It returns
// domain.ErrNotFound for an unknown subscription. When it fails midway the
// batches before stay recovered: calling it again recovers the rest.
func (uc *Deliveries) Recover(ctx context.Context, subscriptionID string, since time.Time) (int, error) {
	batch := cmp.Or(uc.RecoverBatch, DefaultRecoverBatch)
	now := uc.Clock.Now()
	total := 0
	page := ports.Page{Limit: batch}
	for {
		r, err := uc.Deliveries.RecoverDeliveries(ctx, subscriptionID, since, now, page)
		if err != nil {
			return total, err
		}
		if len(r.IDs) > 0 {
			_ = uc.Queue.Publish(ctx, ports.DeliveryStream, plainEntries(subscriptionID, r.IDs...)...) // the scheduler's scan is the fallback
		}
		total += len(r.IDs)
		if r.Next == "" {
			return total, nil
		}
		page.After = r.Next
	}
}

func (uc *Deliveries) status(ctx context.Context, id string) domain.DeliveryStatus {
	d, err := uc.Deliveries.GetDelivery(ctx, id)
	if err != nil {
		return "in an unknown state"
	}
	return d.Status
}
