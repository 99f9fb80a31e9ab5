package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// Migration 00011 dropped the deliveries' foreign keys: the statements
// that insert deliveries key-share-lock their subscriptions instead. These
// tests run an insert while a subscription's deletion is under way (its
// row locked for update and deleted, not committed, as the last step of
// DeleteSubscription leaves it before its commit): the insert must wait for it and then leave
// the deleted subscription out, so no delivery outlives its subscription.

// Migration 00012 dropped the attempts' foreign key too: DeleteSubscription
// deletes its deliveries' attempts itself, a batch at a time, after locking
// the batch's deliveries so that a record in flight is committed first
// (TestDeleteWaitsForARecord).

// deleting deletes subscription id in a transaction of its own, as
// DeleteSubscription does, and leaves it open until the returned function
// commits it.
func (f workerFixture) deleting(t *testing.T, id string) (commit func()) {
	t.Helper()
	tx, err := f.pool.Begin(t.Context())
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.WithoutCancel(t.Context())) })
	for _, stmt := range []string{
		"SELECT id FROM subscriptions WHERE id = $1 FOR UPDATE",
		"DELETE FROM deliveries WHERE subscription_id = $1",
		"DELETE FROM subscriptions WHERE id = $1",
	} {
		_, err := tx.Exec(t.Context(), stmt, id)
		require.NoError(t, err)
	}
	return func() { require.NoError(t, tx.Commit(t.Context())) }
}

// second stores another subscription to every event type.
func (f workerFixture) second(t *testing.T) domain.Subscription {
	t.Helper()
	sub := f.sub
	sub.ID = domain.MustNewID(domain.SubscriptionIDPrefix, f.now.Add(time.Millisecond))
	require.NoError(t, f.store.CreateSubscription(t.Context(), sub))
	return sub
}

// orphans counts the deliveries whose subscription or event is gone.
func (f workerFixture) orphans(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, f.pool.QueryRow(t.Context(), `
		SELECT count(*) FROM deliveries d
		WHERE NOT EXISTS (SELECT 1 FROM subscriptions s WHERE s.id = d.subscription_id)
		   OR NOT EXISTS (SELECT 1 FROM events e WHERE e.id = d.event_id)`).Scan(&n))
	return n
}

func TestFanOutWaitsForADeletionAndLeavesItsSubscriptionOut(t *testing.T) {
	t.Parallel()
	f := newWorkerFixture(t)
	kept := f.second(t)
	e := domain.Event{ID: domain.MustNewID(domain.EventIDPrefix, f.now), Type: "a", Source: "t", Data: []byte(`{}`), Status: domain.EventPending, CreatedAt: f.now}
	_, _, err := f.store.CreateEvent(t.Context(), e, f.now.Add(-time.Hour))
	require.NoError(t, err)
	toGone, toKept := domain.NewDelivery(e, f.sub, f.now), domain.NewDelivery(e, kept, f.now.Add(time.Millisecond))

	commit := f.deleting(t, f.sub.ID)
	type result struct {
		created []string
		err     error
	}
	done := make(chan result, 1)
	go func() {
		created, err := f.store.CreateDeliveries(context.WithoutCancel(t.Context()), []ports.FanOut{{EventID: e.ID, Deliveries: []domain.Delivery{toGone, toKept}}})
		done <- result{created, err}
	}()
	f.stuckStatement(t, "FanOut")
	commit()
	res := <-done
	require.NoError(t, res.err)
	assert.Equal(t, []string{toKept.ID}, res.created, "the deleted subscription gets no delivery")
	assert.Zero(t, f.orphans(t))
}

func TestInlineFanOutWaitsForADeletionAndMatchesAgain(t *testing.T) {
	t.Parallel()
	f := newWorkerFixture(t)
	kept := f.second(t)
	toAll := func(e domain.Event, active *domain.SubscriptionIndex) ([]domain.Delivery, bool) {
		var ds []domain.Delivery
		for i, sub := range active.Match(e.Type) {
			ds = append(ds, domain.NewDeliveryTo(e, sub, e.CreatedAt.Add(time.Duration(i)*time.Millisecond)))
		}
		return ds, true
	}
	// Load the API's copy of the subscriptions while both exist.
	_, _, err := f.store.CreateEventFannedOut(t.Context(), domain.Event{
		ID: domain.MustNewID(domain.EventIDPrefix, f.now), Type: "a", Source: "t", Data: []byte(`{}`), CreatedAt: f.now,
	}, toAll)
	require.NoError(t, err)

	commit := f.deleting(t, f.sub.ID)
	type result struct {
		created []string
		err     error
	}
	done := make(chan result, 1)
	e := domain.Event{ID: domain.MustNewID(domain.EventIDPrefix, f.now.Add(time.Second)), Type: "a", Source: "t", Data: []byte(`{}`), CreatedAt: f.now.Add(time.Second)}
	go func() {
		created, _, err := f.store.CreateEventFannedOut(context.WithoutCancel(t.Context()), e, toAll)
		done <- result{created, err}
	}()
	f.stuckStatement(t, "InsertEventsFannedOut")
	commit()
	res := <-done
	require.NoError(t, res.err)
	ds, err := f.store.EventDeliveries(t.Context(), e.ID, ports.Page{Limit: 100})
	require.NoError(t, err)
	require.Len(t, ds, 1, "matched again without the deleted subscription")
	assert.Equal(t, kept.ID, ds[0].SubscriptionID)
	assert.Equal(t, []string{ds[0].ID}, res.created)
	assert.Zero(t, f.orphans(t))
}

// recording updates delivery d and stores its attempt in a transaction of
// its own, as RecordAttempts does, and leaves it open until the returned
// function commits it.
func (f workerFixture) recording(t *testing.T, d domain.Delivery) (commit func()) {
	t.Helper()
	tx, err := f.pool.Begin(t.Context())
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.WithoutCancel(t.Context())) })
	_, err = tx.Exec(t.Context(), "UPDATE deliveries SET status = 'retrying', attempts = 1 WHERE id = $1", d.ID)
	require.NoError(t, err)
	_, err = tx.Exec(t.Context(), `
		INSERT INTO attempts (delivery_id, subscription_id, attempt, status_code, duration, created_at)
		VALUES ($1, $2, 1, 500, '1 ms', now())`, d.ID, d.SubscriptionID)
	require.NoError(t, err)
	return func() { require.NoError(t, tx.Commit(t.Context())) }
}

func TestDeleteWaitsForARecord(t *testing.T) {
	t.Parallel()
	f := newWorkerFixture(t)
	d := f.deliveries(t, 1, nil)[0]

	commit := f.recording(t, d)
	done := make(chan error, 1)
	go func() {
		for {
			finished, err := f.store.DeleteSubscription(context.WithoutCancel(t.Context()), f.sub.ID, 10)
			if err != nil || finished {
				done <- err
				return
			}
		}
	}()
	f.stuckStatement(t, "LockDeliveriesToDelete")
	commit()
	require.NoError(t, <-done)

	var left int
	require.NoError(t, f.pool.QueryRow(t.Context(), "SELECT count(*) FROM attempts WHERE delivery_id = $1", d.ID).Scan(&left))
	assert.Zero(t, left, "the attempt committed while the deletion waited went with its delivery")
	_, err := f.store.GetDelivery(t.Context(), d.ID)
	assert.ErrorIs(t, err, domain.ErrNotFound)
}
