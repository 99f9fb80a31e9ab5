package storetest

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// matchAll is an inline fan-out to every active subscription that matches
// the event's type, recording which it found.
type matchAll struct {
	mu   sync.Mutex
	seen [][]string
}

func (m *matchAll) fanOut(e domain.Event, active *domain.SubscriptionIndex) ([]domain.Delivery, bool) {
	var ds []domain.Delivery
	var seen []string
	for _, sub := range active.Match(e.Type) {
		seen = append(seen, sub.ID)
		ds = append(ds, domain.NewDeliveryTo(e, sub, e.CreatedAt))
	}
	m.mu.Lock()
	m.seen = append(m.seen, seen)
	m.mu.Unlock()
	return ds, true
}

func testInlineFanOut(t *testing.T, newStore func(t *testing.T) ports.Store) {
	t.Run("StoresTheEventFannedOutWithItsDeliveries", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		a := f.subscription()
		f.subscription(func(s *domain.Subscription) { s.EventTypes = []string{"invoice.*"} })
		c := f.subscription(func(s *domain.Subscription) { s.Active = false })
		var m matchAll
		e := newEvent(base)
		created, fanned, err := f.store.CreateEventFannedOut(f.ctx, e, m.fanOut)
		require.NoError(t, err)
		assert.True(t, fanned)
		require.Len(t, created, 1, "one delivery: to the active subscription whose types match")
		assert.Equal(t, [][]string{{a.ID}}, m.seen, "inline finds the active subscription that matches, not %s", c.ID)

		got, err := f.store.GetEvent(f.ctx, e.ID)
		require.NoError(t, err)
		assert.Equal(t, wantEvent(e), got)
		ds, err := f.store.EventDeliveries(f.ctx, e.ID, everyDelivery)
		require.NoError(t, err)
		require.Len(t, ds, 1)
		assert.Equal(t, created[0], ds[0].ID)
		assert.Equal(t, a.ID, ds[0].SubscriptionID)
		assert.Equal(t, domain.DeliveryPending, ds[0].Status)
		assert.Equal(t, us(e.CreatedAt), ds[0].NextAttemptAt, "due at once")

		unfanned, err := f.store.UnfannedEvents(f.ctx, base.Add(domain.DefaultTimeout*100), 0, 10)
		require.NoError(t, err)
		assert.Empty(t, unfanned, "a fanned-out event is not in the outbox")
		due, err := f.due(base, 0, 10)
		require.NoError(t, err)
		assert.Equal(t, created, due, "the delivery counts as enqueued at creation: due once its requeue window passed")
		claimed, err := f.store.ClaimDelivery(f.ctx, created[0], base, 0)
		require.NoError(t, err)
		assert.Equal(t, wantEvent(e), claimed.Event)
	})

	t.Run("NoMatchIsDeliveredAtOnce", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		f.subscription(func(s *domain.Subscription) { s.EventTypes = []string{"invoice.*"} })
		var m matchAll
		e := newEvent(base)
		created, fanned, err := f.store.CreateEventFannedOut(f.ctx, e, m.fanOut)
		require.NoError(t, err)
		assert.True(t, fanned)
		assert.Empty(t, created)
		assertEventStatus(t, f, e.ID, domain.EventDelivered, "nothing to deliver")
	})

	t.Run("DeclinedIsLeftToTheFanOutStage", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		f.subscription()
		e := newEvent(base)
		created, fanned, err := f.store.CreateEventFannedOut(f.ctx, e, func(domain.Event, *domain.SubscriptionIndex) ([]domain.Delivery, bool) {
			return nil, false
		})
		require.NoError(t, err)
		assert.False(t, fanned)
		assert.Empty(t, created)
		assertEventStatus(t, f, e.ID, domain.EventPending, "awaiting fan-out")
		unfanned, err := f.store.UnfannedEvents(f.ctx, base, 0, 10)
		require.NoError(t, err)
		assert.Equal(t, []string{e.ID}, unfanned, "the outbox sweep finds it")
	})

	t.Run("SeesEverySubscriptionChangeBeforeIt", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		var m matchAll
		publish := func() []string {
			t.Helper()
			created, fanned, err := f.store.CreateEventFannedOut(f.ctx, newEvent(base), m.fanOut)
			require.NoError(t, err)
			require.True(t, fanned)
			return created
		}
		assert.Empty(t, publish(), "no subscriptions yet")
		a := f.subscription()
		assert.Len(t, publish(), 1, "a subscription created before the event gets it")
		b := f.subscription()
		assert.Len(t, publish(), 2)
		_, err := f.store.UpdateSubscription(f.ctx, a.ID, func(s *domain.Subscription) error { s.Active = false; return nil })
		require.NoError(t, err)
		assert.Len(t, publish(), 1, "a deactivated subscription does not")
		require.NoError(t, f.deleteSubscription(b.ID))
		assert.Empty(t, publish(), "nor does a deleted one")
		_, err = f.store.UpdateSubscription(f.ctx, a.ID, func(s *domain.Subscription) error {
			s.Active, s.EventTypes = true, []string{"*"}
			return nil
		})
		require.NoError(t, err)
		assert.Len(t, publish(), 1, "an update is seen")
	})

	t.Run("ExistingIDIsConflictAndStoresNothing", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		f.subscription()
		e := f.event()
		dup := newEvent(base)
		dup.ID = e.ID
		var m matchAll
		_, _, err := f.store.CreateEventFannedOut(f.ctx, dup, m.fanOut)
		require.ErrorIs(t, err, domain.ErrConflict)
		ds, err := f.store.EventDeliveries(f.ctx, e.ID, everyDelivery)
		require.NoError(t, err)
		assert.Empty(t, ds, "no delivery was stored for the refused event")
	})

	t.Run("ConcurrentPublishesEachGetTheirOwnDeliveries", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		subs := []domain.Subscription{f.subscription(), f.subscription()}
		var m matchAll
		const n = 100
		events := make([]domain.Event, n)
		created := make([][]string, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			events[i] = newEvent(base)
			if i%3 == 0 {
				events[i].Type = "invoice.paid" // matches neither
			}
			wg.Go(func() { created[i], _, errs[i] = f.store.CreateEventFannedOut(f.ctx, events[i], m.fanOut) })
		}
		wg.Wait()
		for i, e := range events {
			require.NoError(t, errs[i], "event %d", i)
			ds, err := f.store.EventDeliveries(f.ctx, e.ID, everyDelivery)
			require.NoError(t, err)
			assert.ElementsMatch(t, created[i], ids(ds), "event %d: its own deliveries", i)
			want := 0
			if i%3 != 0 {
				want = len(subs)
			}
			assert.Len(t, ds, want, "event %d", i)
		}
	})

	t.Run("ARejectedEventDoesNotFailOthers", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		f.subscription()
		existing := f.event()
		var m matchAll
		const n = 40
		errs := make([]error, n)
		events := make([]domain.Event, n)
		var wg sync.WaitGroup
		for i := range n {
			events[i] = newEvent(base)
			if i == n/2 {
				events[i].ID = existing.ID
			}
			wg.Go(func() { _, _, errs[i] = f.store.CreateEventFannedOut(f.ctx, events[i], m.fanOut) })
		}
		wg.Wait()
		for i := range n {
			if i == n/2 {
				assert.ErrorIs(t, errs[i], domain.ErrConflict)
				continue
			}
			require.NoError(t, errs[i], "event %d", i)
			ds, err := f.store.EventDeliveries(f.ctx, events[i].ID, everyDelivery)
			require.NoError(t, err)
			assert.Len(t, ds, 1, fmt.Sprintf("event %d", i))
		}
	})

	t.Run("KeyedEventIsRefused", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		e := newEvent(base)
		e.IdempotencyKey = "k"
		var m matchAll
		_, _, err := f.store.CreateEventFannedOut(f.ctx, e, m.fanOut)
		require.Error(t, err)
		_, err = f.store.GetEvent(f.ctx, e.ID)
		assert.ErrorIs(t, err, domain.ErrNotFound)
		assert.False(t, slices.ContainsFunc(m.seen, func([]string) bool { return true }), "inline was not called")
	})
}
