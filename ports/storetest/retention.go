package storetest

import (
	"crypto/rand"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// RetentionStore is a store that ages its history out.
type RetentionStore interface {
	ports.Store
	ports.Retention
}

// RunRetention is the contract suite of ports.Retention. newStore returns
// a fresh, empty store that takes history made from now to now plus
// retention (a store with time windows has them made).
func RunRetention(t *testing.T, newStore func(t *testing.T, now time.Time, retention time.Duration) RetentionStore) {
	t.Run("DropsTerminalHistoryAndKeepsLiveHistory", func(t *testing.T) {
		t.Parallel()
		testRetention(t, newStore)
	})
	t.Run("RefusesAShortRetention", func(t *testing.T) {
		t.Parallel()
		now := time.Now().UTC()
		store := newStore(t, now, time.Minute)
		_, err := store.MaintainHistory(t.Context(), now, time.Minute-time.Second)
		assert.ErrorContains(t, err, "retention 59s is shorter than the minimum 1m0s")
	})
}

func testRetention(t *testing.T, newStore func(t *testing.T, now time.Time, retention time.Duration) RetentionStore) {
	ctx := t.Context()
	now := time.Now().UTC().Truncate(time.Millisecond)
	const retention = time.Minute
	store := newStore(t, now, retention)
	sub := newSubscription(now)
	require.NoError(t, store.CreateSubscription(ctx, sub))

	// event stores an event made at at; with a delivery whose one attempt
	// left it in status, unless status is "" (never fanned out).
	event := func(at time.Time, status domain.DeliveryStatus, key string) (domain.Event, domain.Delivery) {
		t.Helper()
		e := eventAt(t, at)
		e.IdempotencyKey = key
		_, _, err := store.CreateEvent(ctx, e, at.Add(-time.Hour))
		require.NoError(t, err)
		if status == "" {
			return e, domain.Delivery{}
		}
		d := domain.NewDelivery(e, sub, at)
		_, err = store.CreateDeliveries(ctx, []ports.FanOut{{EventID: e.ID, Deliveries: []domain.Delivery{d}}})
		require.NoError(t, err)
		d.Status, d.Attempts, d.NextAttemptAt, d.UpdatedAt = status, 1, at.Add(100*time.Second), at
		_, err = store.RecordAttempt(ctx, d, domain.Attempt{
			DeliveryID: d.ID, SubscriptionID: sub.ID, Number: 1, StatusCode: 500, CreatedAt: at})
		require.NoError(t, err)
		return e, d
	}
	// Half a retention apart: never in one window.
	delivered, deliveredTo := event(now, domain.DeliveryDelivered, "export-1")
	retrying, retryingTo := event(now.Add(retention/2), domain.DeliveryRetrying, "")
	unfanned, _ := event(now.Add(retention), "", "")

	later := now.Add(10 * retention)
	_, err := store.MaintainHistory(ctx, later, retention)
	require.NoError(t, err)
	_, err = store.GetEvent(ctx, delivered.ID)
	assert.ErrorIs(t, err, domain.ErrNotFound, "a delivered event past the retention is gone")
	_, err = store.GetDelivery(ctx, deliveredTo.ID)
	assert.ErrorIs(t, err, domain.ErrNotFound, "with its delivery")
	_, err = store.DeliveryAttempts(ctx, deliveredTo.ID)
	assert.ErrorIs(t, err, domain.ErrNotFound, "and its attempts")
	_, err = store.GetEvent(ctx, retrying.ID)
	require.NoError(t, err, "an event with a delivery still retrying stays")
	attempts, err := store.DeliveryAttempts(ctx, retryingTo.ID)
	require.NoError(t, err)
	assert.Len(t, attempts, 1, "with its delivery's attempts")
	_, err = store.GetEvent(ctx, unfanned.ID)
	require.NoError(t, err, "an event not fanned out stays")
	// Its key is free, though its idempotency window (a day) is not over.
	again := eventAt(t, later)
	again.IdempotencyKey = "export-1"
	_, created, err := store.CreateEvent(ctx, again, later.Add(-24*time.Hour))
	require.NoError(t, err)
	assert.True(t, created, "the key of an event that is gone is free")

	retryingTo.Status, retryingTo.Attempts = domain.DeliveryDead, 2
	_, err = store.RecordAttempt(ctx, retryingTo, domain.Attempt{
		DeliveryID: retryingTo.ID, SubscriptionID: sub.ID, Number: 2, StatusCode: 500, CreatedAt: later})
	require.NoError(t, err)
	_, err = store.MaintainHistory(ctx, later, retention)
	require.NoError(t, err)
	_, err = store.GetEvent(ctx, retrying.ID)
	assert.ErrorIs(t, err, domain.ErrNotFound, "once its delivery is terminal, it goes")
	_, err = store.GetDelivery(ctx, retryingTo.ID)
	assert.ErrorIs(t, err, domain.ErrNotFound)
	_, err = store.GetEvent(ctx, unfanned.ID)
	require.NoError(t, err, "an event not fanned out still stays")
}

// eventAt is newEvent with an id of at's time: not from the process's
// monotonic source, which after another test's id years ahead would make
// ids of that time.
func eventAt(t *testing.T, at time.Time) domain.Event {
	t.Helper()
	e := newEvent(at)
	id, err := domain.NewID(domain.EventIDPrefix, at, rand.Reader)
	require.NoError(t, err)
	e.ID = id
	return e
}
