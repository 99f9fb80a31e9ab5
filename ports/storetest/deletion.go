package storetest

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// deletionBatch is the batch the suite deletes subscriptions in: small,
// so that every test that deletes one with deliveries takes several.
const deletionBatch = 2

// deleteSubscription deletes subscription id, batch after batch, as the
// application does.
func (f *fixture) deleteSubscription(id string) error {
	f.t.Helper()
	for calls := 0; ; calls++ {
		require.Less(f.t, calls, 1000, "deleting subscription %s must end", id)
		done, err := f.store.DeleteSubscription(f.ctx, id, deletionBatch)
		if err != nil || done {
			return err
		}
	}
}

// testDeletion covers deleting a subscription with more deliveries than
// one batch: bounded steps, hidden from the first, resumable.
func testDeletion(t *testing.T, newStore func(t *testing.T) ports.Store) {
	testConcurrentDeletions(t, newStore)
	t.Run("ABatchAtATimeHiddenFromTheFirstAndResumable", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		gone, kept := f.subscription(), f.subscription()
		const n = 5
		var events []domain.Event
		var goneDeliveries []domain.Delivery
		for i := range n {
			e := f.event()
			events = append(events, e)
			ds := f.fanOut(e, base, gone, kept)
			f.record(f.claim(ds[1], base), base, outcome{status: domain.DeliveryDelivered, statusCode: 200})
			if i%2 == 0 {
				// An attempt to delete with it.
				ds[0], _ = f.record(f.claim(ds[0], base), base, outcome{status: domain.DeliveryRetrying, statusCode: 500, next: base.Add(time.Minute)})
			}
			goneDeliveries = append(goneDeliveries, ds[0])
		}
		for _, e := range events {
			assertEventStatus(t, f, e.ID, domain.EventPending, "before: the delivery to gone is in flight")
		}

		// One call, then the deletion is interrupted.
		done, err := f.store.DeleteSubscription(f.ctx, gone.ID, deletionBatch)
		require.NoError(t, err)
		require.False(t, done, "%d deliveries take more than one batch of %d", n, deletionBatch)
		left := 0
		for _, d := range goneDeliveries {
			if _, err := f.store.GetDelivery(f.ctx, d.ID); err == nil {
				left++
			}
		}
		assert.GreaterOrEqual(t, left, n-deletionBatch, "one call deletes at most one batch")
		assert.Less(t, left, n, "one call deletes a batch")

		// The interrupted deletion is listed for the scheduler to finish,
		// and leaves the subscription hidden.
		unfinished, err := f.store.UnfinishedDeletions(f.ctx, 10)
		require.NoError(t, err)
		assert.Equal(t, []string{gone.ID}, unfinished, "UnfinishedDeletions")
		_, err = f.store.GetSubscription(f.ctx, gone.ID)
		assert.ErrorIs(t, err, domain.ErrNotFound, "GetSubscription")
		_, err = f.store.UpdateSubscription(f.ctx, gone.ID, func(s *domain.Subscription) error { s.Active = true; return nil })
		assert.ErrorIs(t, err, domain.ErrNotFound, "UpdateSubscription")
		_, err = f.store.RecoverDeliveries(f.ctx, gone.ID, base, base, ports.Page{Limit: 10})
		assert.ErrorIs(t, err, domain.ErrNotFound, "RecoverDeliveries")
		listed, err := f.store.ListSubscriptions(f.ctx, ports.Page{Limit: 10})
		require.NoError(t, err)
		assert.Equal(t, []string{kept.ID}, subscriptionIDs(listed), "ListSubscriptions")
		active, err := f.store.ActiveSubscriptions(f.ctx)
		require.NoError(t, err)
		assert.Equal(t, []string{kept.ID}, subscriptionIDs(active), "ActiveSubscriptions: nothing new is fanned out to it")
		remaining := slices.IndexFunc(goneDeliveries, func(d domain.Delivery) bool {
			_, err := f.store.GetDelivery(f.ctx, d.ID)
			return err == nil
		})
		c, err := f.store.ClaimDelivery(f.ctx, goneDeliveries[remaining].ID, base.Add(time.Hour), time.Minute)
		if err == nil {
			assert.False(t, c.Subscription.Active, "a claim of a delivery left behind finds its subscription inactive, so no request is made")
		} else {
			assert.ErrorIs(t, err, domain.ErrNotFound)
		}

		// A fan-out that matched gone before the mark (a copy of the active
		// subscriptions not yet refreshed) may still store a delivery to it.
		late := f.event()
		lateDelivery := newDelivery(late, gone, base)
		_, err = f.store.CreateDeliveries(f.ctx, []ports.FanOut{{EventID: late.ID, Deliveries: []domain.Delivery{lateDelivery}}})
		require.NoError(t, err)

		// Deleting again finishes it.
		require.NoError(t, f.deleteSubscription(gone.ID))
		_, err = f.store.GetDelivery(f.ctx, lateDelivery.ID)
		assert.ErrorIs(t, err, domain.ErrNotFound, "a delivery stored after the mark goes too")
		assertEventStatus(t, f, late.ID, domain.EventDelivered, "and its event has nothing left to deliver")
		for _, d := range goneDeliveries {
			_, err := f.store.GetDelivery(f.ctx, d.ID)
			assert.ErrorIs(t, err, domain.ErrNotFound, "delivery %s is deleted", d.ID)
		}
		for _, e := range events {
			attempts, err := f.store.EventAttempts(f.ctx, e.ID, everyAttempt)
			require.NoError(t, err)
			for _, a := range attempts {
				assert.Equal(t, kept.ID, a.SubscriptionID, "only the kept subscription's attempts remain")
			}
			assertEventStatus(t, f, e.ID, domain.EventDelivered, "rolled up once the delivery in flight is gone")
		}
		_, err = f.store.DeleteSubscription(f.ctx, gone.ID, deletionBatch)
		assert.ErrorIs(t, err, domain.ErrNotFound, "a deletion that is done")
		unfinished, err = f.store.UnfinishedDeletions(f.ctx, 10)
		require.NoError(t, err)
		assert.Empty(t, unfinished, "a deletion that is done is not listed")
	})
}

// testConcurrentDeletions is run from testDeletion.
func testConcurrentDeletions(t *testing.T, newStore func(t *testing.T) ports.Store) {
	t.Run("ConcurrentDeletionsBothFinish", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		gone := f.subscription()
		var ids []string
		for range 20 {
			d := f.fanOut(f.event(), base, gone)[0]
			f.record(f.claim(d, base), base, outcome{status: domain.DeliveryRetrying, statusCode: 500, next: base.Add(time.Minute)})
			ids = append(ids, d.ID)
		}
		var wg sync.WaitGroup
		errs := make([]error, 3)
		for i := range errs {
			wg.Go(func() {
				for {
					done, err := f.store.DeleteSubscription(f.ctx, gone.ID, 3)
					if err != nil || done {
						errs[i] = err
						return
					}
				}
			})
		}
		wg.Wait()
		for i, err := range errs {
			// One that starts after another finished finds it gone.
			if err != nil {
				assert.ErrorIs(t, err, domain.ErrNotFound, "deletion %d", i)
			}
		}
		for _, id := range ids {
			_, err := f.store.GetDelivery(f.ctx, id)
			assert.ErrorIs(t, err, domain.ErrNotFound, "delivery %s", id)
		}
		_, err := f.store.DeleteSubscription(f.ctx, gone.ID, 3)
		assert.ErrorIs(t, err, domain.ErrNotFound, "the subscription is gone")
	})
}

func subscriptionIDs(subs []domain.Subscription) []string {
	out := make([]string, len(subs))
	for i, s := range subs {
		out[i] = s.ID
	}
	return out
}
