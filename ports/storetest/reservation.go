package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// reserved is how long the suite's fresh deliveries are reserved: the
// default timeout plus a 5 s margin fits in it until base+15s.
const reserved = 30 * time.Second

// takeMargin is the lease margin the suite's takes and claims ask for.
const takeMargin = 5 * time.Second

// freshDelivery fans e out to sub with a delivery created at base and
// reserved until base+reserved, and returns it as the store holds it.
func (f *fixture) freshDelivery(e domain.Event, sub domain.Subscription) domain.Delivery {
	f.t.Helper()
	d := newDelivery(e, sub, base)
	d.ReservedUntil = base.Add(reserved)
	created, err := f.store.CreateDeliveries(f.ctx, []ports.FanOut{{EventID: e.ID, Deliveries: []domain.Delivery{d}}})
	require.NoError(f.t, err)
	require.Equal(f.t, []string{d.ID}, created)
	d.ReservedUntil = time.Time{} // never returned
	return wantDelivery(d)
}

// entry returns what a fresh entry tells of d, a delivery freshDelivery
// made: d as its creator stored it, with its reservation.
func entry(d domain.Delivery) domain.Delivery {
	d.ReservedUntil = base.Add(reserved)
	return d
}

func testReservation(t *testing.T, newStore func(t *testing.T) ports.Store) {
	t.Run("TakeReadsAReservedDeliveryWithoutAWrite", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		sub := f.subscription()
		e := f.event()
		d := f.freshDelivery(e, sub)

		_, err := f.store.ClaimDelivery(f.ctx, d.ID, base, takeMargin)
		require.ErrorIs(t, err, domain.ErrConflict, "a reserved delivery is not claimed by anyone else")
		due, err := f.due(base.Add(reserved-time.Microsecond), 0, 10)
		require.NoError(t, err)
		assert.Empty(t, due, "a reserved delivery is not due to the scheduler")

		// The last moment the reservation outlasts a lease: taken.
		last := base.Add(reserved - domain.DefaultTimeout - takeMargin)
		c, err := f.store.TakeDelivery(f.ctx, entry(d), last, takeMargin)
		require.NoError(t, err)
		assert.Equal(t, d, c.Delivery, "taken as stored: pending, not written")
		assert.Equal(t, wantEvent(e), c.Event)
		assert.Equal(t, sub, c.Subscription)

		got, err := f.store.GetDelivery(f.ctx, d.ID)
		require.NoError(t, err)
		assert.Equal(t, d, got, "readers see it pending and unchanged")
		pending, err := f.store.ListDeliveries(f.ctx, ports.DeliveryFilter{Status: domain.DeliveryPending}, ports.Page{Limit: 10})
		require.NoError(t, err)
		assert.Equal(t, []string{d.ID}, ids(pending))
		_, err = f.store.ClaimDelivery(f.ctx, d.ID, last, takeMargin)
		require.ErrorIs(t, err, domain.ErrConflict, "a take leaves the reservation in place")

		stored, _ := f.record(c.Delivery, last.Add(time.Second), outcome{status: domain.DeliveryDelivered, statusCode: 200})
		got, err = f.store.GetDelivery(f.ctx, d.ID)
		require.NoError(t, err)
		assert.Equal(t, stored, got)
	})

	t.Run("TakeClaimsWhenTheReservationIsTooShortForAnAttempt", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		sub := f.subscription()
		d := f.freshDelivery(f.event(), sub)

		late := base.Add(reserved - domain.DefaultTimeout - takeMargin + time.Microsecond)
		c, err := f.store.TakeDelivery(f.ctx, entry(d), late, takeMargin)
		require.NoError(t, err)
		leased := d
		leased.Status, leased.NextAttemptAt, leased.UpdatedAt = domain.DeliveryDelivering, us(late.Add(domain.DefaultTimeout+takeMargin)), us(late)
		assert.Equal(t, leased, c.Delivery, "claimed: leased for a whole attempt past the reservation")
		got, err := f.store.GetDelivery(f.ctx, d.ID)
		require.NoError(t, err)
		assert.Equal(t, leased, got)

		_, err = f.store.TakeDelivery(f.ctx, entry(d), late.Add(time.Second), takeMargin)
		require.ErrorIs(t, err, domain.ErrConflict, "leased: not taken again")
		_, err = f.store.ClaimDelivery(f.ctx, d.ID, base.Add(reserved), takeMargin)
		require.ErrorIs(t, err, domain.ErrConflict, "leased past the reservation's end")
	})

	t.Run("AReservationEndsOnItsOwn", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		sub := f.subscription()
		d := f.freshDelivery(f.event(), sub)

		end := base.Add(reserved)
		due, err := f.due(end, 0, 10)
		require.NoError(t, err)
		assert.Equal(t, []string{d.ID}, due, "due once nobody attempted it in its reservation (its entry was lost)")
		got := f.claim(d, end)
		assert.Equal(t, domain.DeliveryDelivering, got.Status)
	})

	t.Run("AnOutcomeOrAReleaseEndsTheReservation", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		sub := f.subscription()
		e := f.event()
		failed := f.freshDelivery(e, sub)
		c, err := f.store.TakeDelivery(f.ctx, entry(failed), base, takeMargin)
		require.NoError(t, err)
		retry := base.Add(2 * time.Second)
		f.record(c.Delivery, base.Add(time.Second), outcome{status: domain.DeliveryRetrying, statusCode: 500, next: retry})
		_, err = f.store.ClaimDelivery(f.ctx, failed.ID, retry, takeMargin)
		assert.NoError(t, err, "the retry is claimed when due, within what was the reservation")

		other := f.subscription(func(s *domain.Subscription) {
			s.ID = domain.MustNewID(domain.SubscriptionIDPrefix, base.Add(time.Millisecond))
		})
		throttled := f.freshDelivery(f.event(func(e *domain.Event) { e.ID = domain.MustNewID(domain.EventIDPrefix, base.Add(time.Millisecond)) }), other)
		c, err = f.store.TakeDelivery(f.ctx, entry(throttled), base, takeMargin)
		require.NoError(t, err)
		postponed := c.Delivery
		postponed.NextAttemptAt, postponed.Reason, postponed.UpdatedAt = retry, domain.ReasonThrottled, base.Add(time.Second)
		_, err = f.store.ReleaseDelivery(f.ctx, postponed)
		require.NoError(t, err)
		due, err := f.due(retry, time.Hour, 10)
		require.NoError(t, err)
		assert.Equal(t, []string{throttled.ID}, due, "the postponed delivery is due at its new time")
		_, err = f.store.ClaimDelivery(f.ctx, throttled.ID, retry, takeMargin)
		assert.NoError(t, err)
	})

	t.Run("InlineFanOutStoresTheReservation", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		f.subscription()
		e := newEvent(base)
		var made domain.Delivery
		created, fanned, err := f.store.CreateEventFannedOut(f.ctx, e, func(e domain.Event, active *domain.SubscriptionIndex) ([]domain.Delivery, bool) {
			made = domain.NewDeliveryTo(e, active.Match(e.Type)[0], e.CreatedAt)
			made.ReservedUntil = e.CreatedAt.Add(reserved)
			return []domain.Delivery{made}, true
		})
		require.NoError(t, err)
		require.True(t, fanned)
		require.Len(t, created, 1)
		_, err = f.store.ClaimDelivery(f.ctx, created[0], base, takeMargin)
		require.ErrorIs(t, err, domain.ErrConflict, "reserved")
		require.Equal(t, made.ID, created[0])
		c, err := f.store.TakeDelivery(f.ctx, made, base, takeMargin)
		require.NoError(t, err)
		assert.Equal(t, domain.DeliveryPending, c.Delivery.Status, "taken, not claimed")
		assert.Equal(t, wantEvent(e), c.Event)
	})

	t.Run("TakeClaimsWhatIsNotReserved", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		sub := f.subscription()
		d := f.fanOut(f.event(), base, sub)[0]
		c, err := f.store.TakeDelivery(f.ctx, d, base, takeMargin)
		require.NoError(t, err)
		assert.Equal(t, domain.DeliveryDelivering, c.Delivery.Status, "claimed")
		assert.Equal(t, us(base.Add(domain.DefaultTimeout+takeMargin)), c.Delivery.NextAttemptAt)

		_, err = f.store.TakeDelivery(f.ctx, domain.Delivery{ID: domain.MustNewID(domain.DeliveryIDPrefix, base)}, base, takeMargin)
		require.ErrorIs(t, err, domain.ErrNotFound)
	})

	t.Run("AnOrderedDeliveryIsClaimedInLineNotTaken", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		sub := f.subscription(func(s *domain.Subscription) { s.OrderingKey = "/data/order_id" })
		first := f.freshDelivery(f.event(), sub)
		second := f.freshDelivery(f.event(func(e *domain.Event) { e.ID = domain.MustNewID(domain.EventIDPrefix, base.Add(time.Millisecond)) }), sub)
		require.NotEmpty(t, second.OrderingKey)

		_, err := f.store.TakeDelivery(f.ctx, entry(second), base, takeMargin)
		require.ErrorIs(t, err, domain.ErrConflict, "held behind the first: a take checks the line as a claim does")
		c, err := f.store.TakeDelivery(f.ctx, entry(first), base, takeMargin)
		require.NoError(t, err)
		assert.Equal(t, domain.DeliveryDelivering, c.Delivery.Status, "claimed, not read")
	})

	t.Run("TakeSeesTheSubscriptionAsItIsNow", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		sub := f.subscription()
		event := func(ms int) domain.Event {
			return f.event(func(e *domain.Event) {
				e.ID = domain.MustNewID(domain.EventIDPrefix, base.Add(time.Duration(ms)*time.Millisecond))
			})
		}
		d := f.freshDelivery(event(0), sub)
		c, err := f.store.TakeDelivery(f.ctx, entry(d), base, takeMargin)
		require.NoError(t, err)
		assert.Equal(t, sub, c.Subscription)

		// Each change is committed before the next take: the take sees it.
		moved, err := f.store.UpdateSubscription(f.ctx, sub.ID, func(s *domain.Subscription) error {
			s.URL, s.UpdatedAt = "https://moved.example.com/hook", base.Add(time.Second)
			return nil
		})
		require.NoError(t, err)
		d = f.freshDelivery(event(1), sub)
		c, err = f.store.TakeDelivery(f.ctx, entry(d), base, takeMargin)
		require.NoError(t, err)
		assert.Equal(t, moved, c.Subscription, "taken with the subscription as it is now")
		assert.Equal(t, domain.DeliveryPending, c.Delivery.Status)

		disabled, err := f.store.UpdateSubscription(f.ctx, sub.ID, func(s *domain.Subscription) error {
			s.Active, s.DisabledReason, s.UpdatedAt = false, domain.DisabledGone, base.Add(2*time.Second)
			return nil
		})
		require.NoError(t, err)
		c, err = f.store.TakeDelivery(f.ctx, entry(d), base, takeMargin)
		require.NoError(t, err)
		assert.Equal(t, disabled, c.Subscription, "returned disabled, for the caller to settle")

		require.NoError(t, f.deleteSubscription(sub.ID))
		_, err = f.store.TakeDelivery(f.ctx, entry(d), base, takeMargin)
		require.ErrorIs(t, err, domain.ErrNotFound, "gone with its subscription")
	})
}
