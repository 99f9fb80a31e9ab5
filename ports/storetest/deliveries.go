package storetest

import (
	"cmp"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

func testDeliveries(t *testing.T, newStore func(t *testing.T) ports.Store) {
	t.Run("CreateDeliveriesStoresAndMarksFannedOut", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		subA, subB := f.subscription(), f.subscription()
		e1, e2, lonely := f.event(), f.event(), f.event()

		d1a := newDelivery(e1, subA, base)
		d1a.OrderingKey = "customer-1"
		d1b := newDelivery(e1, subB, base)
		d2a := newDelivery(e2, subA, base.Add(time.Second))
		fanouts := []ports.FanOut{
			{EventID: e1.ID, Deliveries: []domain.Delivery{d1a, d1b}},
			{EventID: lonely.ID},
			{EventID: e2.ID, Deliveries: []domain.Delivery{d2a}},
		}
		created, err := f.store.CreateDeliveries(f.ctx, fanouts)
		require.NoError(t, err)
		assert.ElementsMatch(t, []string{d1a.ID, d1b.ID, d2a.ID}, created)

		got, err := f.store.GetDelivery(f.ctx, d1a.ID)
		require.NoError(t, err)
		assert.Equal(t, wantDelivery(d1a), got)

		deliveries, err := f.store.EventDeliveries(f.ctx, e1.ID, everyDelivery)
		require.NoError(t, err)
		want := []domain.Delivery{wantDelivery(d1a), wantDelivery(d1b)}
		slices.SortFunc(want, func(a, b domain.Delivery) int { return cmp.Compare(a.ID, b.ID) })
		assert.Equal(t, want, deliveries, "an event's deliveries in id order")

		for _, e := range []domain.Event{e1, e2} {
			got, err := f.store.GetEvent(f.ctx, e.ID)
			require.NoError(t, err)
			assert.Equal(t, domain.EventPending, got.Status, "an event with deliveries stays pending")
		}
		got2, err := f.store.GetEvent(f.ctx, lonely.ID)
		require.NoError(t, err)
		assert.Equal(t, domain.EventDelivered, got2.Status, "an event with no deliveries is delivered")
		none, err := f.store.EventDeliveries(f.ctx, lonely.ID, everyDelivery)
		require.NoError(t, err)
		assert.Empty(t, none)

		unfanned, err := f.store.UnfannedEvents(f.ctx, base.Add(time.Hour), requeueAfter, 10)
		require.NoError(t, err)
		assert.Empty(t, unfanned, "every event's fan-out is recorded")
	})

	t.Run("CreateDeliveriesLeavesOutADeletedSubscription", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		kept := f.subscription()
		gone := f.subscription(func(s *domain.Subscription) {
			s.ID = domain.MustNewID(domain.SubscriptionIDPrefix, base.Add(time.Millisecond))
		})
		require.NoError(t, f.deleteSubscription(gone.ID))
		e := f.event()
		toKept, toGone := newDelivery(e, kept, base), newDelivery(e, gone, base)
		toGone.ID = domain.MustNewID(domain.DeliveryIDPrefix, base.Add(time.Millisecond))
		created, err := f.store.CreateDeliveries(f.ctx, []ports.FanOut{{EventID: e.ID, Deliveries: []domain.Delivery{toKept, toGone}}})
		require.NoError(t, err, "a subscription deleted since the match does not fail the fan-out")
		assert.Equal(t, []string{toKept.ID}, created)
		ds, err := f.store.EventDeliveries(f.ctx, e.ID, everyDelivery)
		require.NoError(t, err)
		assert.Equal(t, []string{toKept.ID}, ids(ds))
		again, err := f.store.CreateDeliveries(f.ctx, []ports.FanOut{{EventID: e.ID, Deliveries: []domain.Delivery{toGone}}})
		require.NoError(t, err)
		assert.Empty(t, again, "the event is fanned out")
	})

	t.Run("CreateDeliveriesIsIdempotent", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		sub, other := f.subscription(), f.subscription()
		e := f.event()
		first := ports.FanOut{EventID: e.ID, Deliveries: []domain.Delivery{newDelivery(e, sub, base)}}
		created, err := f.store.CreateDeliveries(f.ctx, []ports.FanOut{first})
		require.NoError(t, err)
		require.Len(t, created, 1)

		// A redelivered stream entry fans out again with fresh ids (and
		// perhaps a subscription created meanwhile): nothing is added.
		fresh := f.event()
		again := []ports.FanOut{
			{EventID: e.ID, Deliveries: []domain.Delivery{newDelivery(e, sub, base), newDelivery(e, other, base)}},
			{EventID: fresh.ID, Deliveries: []domain.Delivery{newDelivery(fresh, sub, base)}},
		}
		created, err = f.store.CreateDeliveries(f.ctx, again)
		require.NoError(t, err)
		assert.Equal(t, []string{again[1].Deliveries[0].ID}, created, "only the new event's delivery is created")

		deliveries, err := f.store.EventDeliveries(f.ctx, e.ID, everyDelivery)
		require.NoError(t, err)
		assert.Equal(t, []string{first.Deliveries[0].ID}, ids(deliveries))

		created, err = f.store.CreateDeliveries(f.ctx, nil)
		require.NoError(t, err)
		assert.Empty(t, created)
	})

	t.Run("ConcurrentFanOutsOfOneEventCreateOnce", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		subs := []domain.Subscription{f.subscription(), f.subscription(), f.subscription()}
		events := []domain.Event{f.event(), f.event()}
		const workers = 6
		var wg sync.WaitGroup
		var mu sync.Mutex
		var all []string
		errs := make(chan error, workers)
		for w := range workers {
			wg.Go(func() {
				var fanouts []ports.FanOut
				for i := range events {
					// Alternate the order so batches overlap both ways.
					e := events[(i+w)%len(events)]
					fo := ports.FanOut{EventID: e.ID}
					for _, sub := range subs {
						fo.Deliveries = append(fo.Deliveries, newDelivery(e, sub, base))
					}
					fanouts = append(fanouts, fo)
				}
				created, err := f.store.CreateDeliveries(f.ctx, fanouts)
				errs <- err
				mu.Lock()
				all = append(all, created...)
				mu.Unlock()
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		assert.Len(t, all, len(events)*len(subs), "each event is fanned out once")
		for _, e := range events {
			deliveries, err := f.store.EventDeliveries(f.ctx, e.ID, everyDelivery)
			require.NoError(t, err)
			assert.Len(t, deliveries, len(subs))
		}
	})

	t.Run("GetDeliveryMissingIsNotFound", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		_, err := f.store.GetDelivery(f.ctx, domain.MustNewID(domain.DeliveryIDPrefix, base))
		assert.ErrorIs(t, err, domain.ErrNotFound)
		deliveries, err := f.store.EventDeliveries(f.ctx, domain.MustNewID(domain.EventIDPrefix, base), everyDelivery)
		require.NoError(t, err)
		assert.Empty(t, deliveries, "an event that does not exist has no deliveries")
	})

	t.Run("ClaimLeasesADueDelivery", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		sub := f.subscription(func(s *domain.Subscription) { s.Headers = map[string]string{"X-Tenant": "acme"} })
		e := f.event()
		d := f.fanOut(e, base, sub)[0]

		now := base.Add(time.Second)
		lease := now.Add(30*time.Second + time.Nanosecond)
		c, err := f.store.ClaimDelivery(f.ctx, d.ID, now, leaseMargin(now, lease))
		require.NoError(t, err)
		want := d
		want.Status = domain.DeliveryDelivering
		want.NextAttemptAt = us(lease)
		want.UpdatedAt = us(now)
		assert.Equal(t, want.ID, c.Delivery.ID)
		assert.Equal(t, want.Status, c.Delivery.Status)
		assert.Equal(t, want.NextAttemptAt, c.Delivery.NextAttemptAt, "the lease is the next attempt time")
		assert.Equal(t, want.Attempts, c.Delivery.Attempts)
		assert.Equal(t, e, c.Event, "the claim carries the event")
		assert.Equal(t, sub, c.Subscription, "the claim carries the subscription")

		stored, err := f.store.GetDelivery(f.ctx, d.ID)
		require.NoError(t, err)
		assert.Equal(t, c.Delivery, stored, "the claim is stored")

		_, err = f.store.ClaimDelivery(f.ctx, d.ID, now.Add(time.Second), leaseMargin(now.Add(time.Second), now.Add(time.Minute)))
		assert.ErrorIs(t, err, domain.ErrConflict, "a leased delivery cannot be claimed again")

		c2, err := f.store.ClaimDelivery(f.ctx, d.ID, lease, leaseMargin(lease, lease.Add(30*time.Second)))
		require.NoError(t, err, "a lease that expired (its worker died) can be claimed")
		assert.Equal(t, domain.DeliveryDelivering, c2.Delivery.Status)
		assert.Equal(t, us(lease.Add(30*time.Second)), c2.Delivery.NextAttemptAt)
	})

	t.Run("ClaimLeasesForTheSubscriptionsTimeout", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		sub := f.subscription(func(s *domain.Subscription) { s.Timeout = 3 * time.Second })
		d := f.fanOut(f.event(), base, sub)[0]
		c, err := f.store.ClaimDelivery(f.ctx, d.ID, base, 2*time.Second)
		require.NoError(t, err)
		assert.Equal(t, us(base.Add(5*time.Second)), c.Delivery.NextAttemptAt,
			"a worker that dies holds the delivery for one timeout plus the margin, no longer")
	})

	t.Run("ConcurrentClaimsLeaseOnce", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		sub := f.subscription()
		d := f.fanOut(f.event(), base, sub)[0]
		// A stream entry handed to several workers (a reclaim racing a slow
		// worker): exactly one of them gets to make the attempt.
		const workers = 8
		errs := make(chan error, workers)
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				_, err := f.store.ClaimDelivery(f.ctx, d.ID, base, leaseMargin(base, base.Add(30*time.Second)))
				errs <- err
			})
		}
		wg.Wait()
		close(errs)
		claimed := 0
		for err := range errs {
			if err == nil {
				claimed++
				continue
			}
			assert.ErrorIs(t, err, domain.ErrConflict)
		}
		assert.Equal(t, 1, claimed, "exactly one worker holds the lease")
	})

	t.Run("ClaimRefusesWhatIsNotDue", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		sub := f.subscription()
		e := f.event()
		future := f.fanOut(e, base.Add(time.Minute), sub)[0]

		_, err := f.store.ClaimDelivery(f.ctx, future.ID, base, leaseMargin(base, base.Add(30*time.Second)))
		assert.ErrorIs(t, err, domain.ErrConflict, "not due yet")
		_, err = f.store.ClaimDelivery(f.ctx, future.ID, base.Add(time.Minute), leaseMargin(base.Add(time.Minute), base.Add(2*time.Minute)))
		assert.NoError(t, err, "due exactly at NextAttemptAt")

		_, err = f.store.ClaimDelivery(f.ctx, domain.MustNewID(domain.DeliveryIDPrefix, base), base, leaseMargin(base, base.Add(time.Minute)))
		assert.ErrorIs(t, err, domain.ErrNotFound)
	})

	t.Run("ClaimRefusesTerminalDeliveries", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		subA, subB := f.subscription(), f.subscription()
		e := f.event()
		ds := f.fanOut(e, base, subA, subB)
		f.record(f.claim(ds[0], base), base, outcome{status: domain.DeliveryDelivered, statusCode: 200})
		f.record(f.claim(ds[1], base), base, outcome{status: domain.DeliveryDead, statusCode: 400})
		for _, d := range ds {
			_, err := f.store.ClaimDelivery(f.ctx, d.ID, base.Add(time.Hour), leaseMargin(base.Add(time.Hour), base.Add(2*time.Hour)))
			assert.ErrorIs(t, err, domain.ErrConflict, "terminal delivery %s", d.ID)
		}
	})

	t.Run("ClaimAfterRetryIsDue", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		sub := f.subscription()
		d := f.fanOut(f.event(), base, sub)[0]
		retry := base.Add(time.Minute)
		f.record(f.claim(d, base), base, outcome{status: domain.DeliveryRetrying, statusCode: 503, next: retry})
		_, err := f.store.ClaimDelivery(f.ctx, d.ID, retry.Add(-time.Microsecond), leaseMargin(retry.Add(-time.Microsecond), retry.Add(time.Minute)))
		assert.ErrorIs(t, err, domain.ErrConflict, "a retry is not due before its time")
		c, err := f.store.ClaimDelivery(f.ctx, d.ID, retry, leaseMargin(retry, retry.Add(time.Minute)))
		require.NoError(t, err)
		assert.Equal(t, 1, c.Delivery.Attempts)
		assert.Equal(t, 503, c.Delivery.LastStatusCode)
	})

	t.Run("RecordAttemptStoresStateAndAttempt", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		sub := f.subscription()
		e := f.event()
		d := f.claim(f.fanOut(e, base, sub)[0], base)

		now := base.Add(2 * time.Second)
		next, a := attemptOf(d, now, outcome{status: domain.DeliveryRetrying, statusCode: 503, next: now.Add(time.Minute), err: "503 Service Unavailable"})
		next.Reason = domain.ReasonThrottled
		a.ResponseBody = "upstream \xff\x00 busy" // bytes as received, not UTF-8
		a.Duration = 1234567 * time.Nanosecond
		released, err := f.store.RecordAttempt(f.ctx, next, a)
		require.NoError(t, err)
		assert.Empty(t, released, "an unordered delivery lets nothing go")

		got, err := f.store.GetDelivery(f.ctx, d.ID)
		require.NoError(t, err)
		assert.Equal(t, wantDelivery(next), got)
		attempts, err := f.store.EventAttempts(f.ctx, e.ID, everyAttempt)
		require.NoError(t, err)
		require.Len(t, attempts, 1)
		assert.Equal(t, wantAttempt(a), attempts[0])
		assert.Equal(t, 1234*time.Microsecond, attempts[0].Duration)
		ev, err := f.store.GetEvent(f.ctx, e.ID)
		require.NoError(t, err)
		assert.Equal(t, domain.EventPending, ev.Status, "a retrying delivery keeps its event pending")

		// A timeout: no response, so no status code.
		d2 := f.claim(got, now.Add(time.Minute))
		next2, _ := f.record(d2, now.Add(2*time.Minute), outcome{status: domain.DeliveryRetrying, next: now.Add(5 * time.Minute), err: "context deadline exceeded"})
		got, err = f.store.GetDelivery(f.ctx, d.ID)
		require.NoError(t, err)
		assert.Equal(t, next2, got)
		assert.Zero(t, got.LastStatusCode)
	})

	t.Run("RecordAttemptOfMissingDeliveryIsNotFound", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		sub := f.subscription()
		e := f.event()
		d, a := attemptOf(newDelivery(e, sub, base), base, outcome{status: domain.DeliveryDelivered, statusCode: 200})
		_, err := f.store.RecordAttempt(f.ctx, d, a)
		assert.ErrorIs(t, err, domain.ErrNotFound)
		attempts, err := f.store.EventAttempts(f.ctx, e.ID, everyAttempt)
		require.NoError(t, err)
		assert.Empty(t, attempts, "no attempt was stored")
	})

	t.Run("EventIsDeliveredWhenEveryDeliveryIs", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		subA, subB := f.subscription(), f.subscription()
		e := f.event()
		ds := f.fanOut(e, base, subA, subB)
		f.record(f.claim(ds[0], base), base, outcome{status: domain.DeliveryDelivered, statusCode: 204})
		assertEventStatus(t, f, e.ID, domain.EventPending, "one delivery is still pending")
		f.record(f.claim(ds[1], base), base, outcome{status: domain.DeliveryDelivered, statusCode: 200})
		assertEventStatus(t, f, e.ID, domain.EventDelivered, "every delivery is delivered")
	})

	t.Run("EventFailsWhenAnyDeliveryIsDead", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		subA, subB, subC := f.subscription(), f.subscription(), f.subscription()
		e := f.event()
		ds := f.fanOut(e, base, subA, subB, subC)
		f.record(f.claim(ds[0], base), base, outcome{status: domain.DeliveryDead, statusCode: 404})
		assertEventStatus(t, f, e.ID, domain.EventPending, "other deliveries are not terminal yet")
		f.record(f.claim(ds[1], base), base, outcome{status: domain.DeliveryDelivered, statusCode: 200})
		d, _ := f.record(f.claim(ds[2], base), base, outcome{status: domain.DeliveryRetrying, statusCode: 500, next: base.Add(time.Second)})
		assertEventStatus(t, f, e.ID, domain.EventPending, "a retrying delivery is not terminal")
		f.record(f.claim(d, base.Add(time.Second)), base.Add(time.Second), outcome{status: domain.DeliveryDelivered, statusCode: 200})
		assertEventStatus(t, f, e.ID, domain.EventFailed, "one delivery is dead")
	})

	t.Run("ConcurrentTerminalAttemptsRollUpTheEvent", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		for _, final := range []domain.DeliveryStatus{domain.DeliveryDelivered, domain.DeliveryDead} {
			var subs []domain.Subscription
			for range 8 {
				subs = append(subs, f.subscription())
			}
			e := f.event()
			ds := f.fanOut(e, base, subs...)
			var wg sync.WaitGroup
			errs := make(chan error, len(ds))
			for i, d := range ds {
				claimed := f.claim(d, base)
				wg.Go(func() {
					status := domain.DeliveryDelivered
					if i == len(ds)-1 {
						status = final
					}
					d, a := attemptOf(claimed, base, outcome{status: status, statusCode: 200})
					_, err := f.store.RecordAttempt(f.ctx, d, a)
					errs <- err
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			want := domain.EventDelivered
			if final == domain.DeliveryDead {
				want = domain.EventFailed
			}
			assertEventStatus(t, f, e.ID, want, "deliveries that finish together still settle their event")
		}
	})

	t.Run("EventAttemptsBySubscriptionThenNumber", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		subA, subB := f.subscription(), f.subscription()
		e := f.event()
		ds := f.fanOut(e, base, subA, subB)
		slices.SortFunc(ds, func(a, b domain.Delivery) int { return cmp.Compare(b.ID, a.ID) }) // highest id first

		var want []domain.Attempt
		now := base
		current := slices.Clone(ds)
		for round := range 3 {
			for i := range current {
				status := domain.DeliveryRetrying
				if round == 2 {
					status = domain.DeliveryDead
				}
				claimed := f.claim(current[i], now)
				var a domain.Attempt
				current[i], a = f.record(claimed, now, outcome{status: status, statusCode: 500 + round, next: now.Add(time.Second)})
				want = append(want, a)
			}
			now = now.Add(time.Second)
		}
		slices.SortFunc(want, func(a, b domain.Attempt) int {
			if c := cmp.Compare(a.SubscriptionID, b.SubscriptionID); c != 0 {
				return c
			}
			return a.Number - b.Number
		})
		got, err := f.store.EventAttempts(f.ctx, e.ID, everyAttempt)
		require.NoError(t, err)
		assert.Equal(t, want, got)
		for _, a := range got {
			assert.Equal(t, map[string]string{ds[0].ID: ds[0].SubscriptionID, ds[1].ID: ds[1].SubscriptionID}[a.DeliveryID], a.SubscriptionID)
		}

		none, err := f.store.EventAttempts(f.ctx, f.event().ID, everyAttempt)
		require.NoError(t, err)
		assert.Empty(t, none, "an event without attempts")
		none, err = f.store.EventAttempts(f.ctx, domain.MustNewID(domain.EventIDPrefix, base), everyAttempt)
		require.NoError(t, err)
		assert.Empty(t, none, "an event that does not exist")
	})
}

func assertEventStatus(t *testing.T, f *fixture, eventID string, want domain.EventStatus, why string) {
	t.Helper()
	e, err := f.store.GetEvent(f.ctx, eventID)
	require.NoError(t, err)
	assert.Equal(t, want, e.Status, why)
}
