package storetest

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// testRecovery covers manual retries and a subscription's recovery: the
// ways a dead delivery becomes due again.
func testRecovery(t *testing.T, newStore func(t *testing.T) ports.Store) {
	t.Run("RetryMakesTheDeliveryDueNow", func(t *testing.T) {
		t.Parallel()
		now := base.Add(time.Hour)
		cases := []struct {
			name string
			// prepare brings the fanned-out delivery d into the state the
			// retry starts from, and returns it as stored.
			prepare func(f *fixture, d domain.Delivery) domain.Delivery
		}{
			{
				name: "dead",
				prepare: func(f *fixture, d domain.Delivery) domain.Delivery {
					d, _ = f.record(f.claim(d, base), base, outcome{status: domain.DeliveryDead, statusCode: 404, err: "404 Not Found"})
					assertEventStatus(f.t, f, d.EventID, domain.EventFailed, "before the retry")
					return d
				},
			},
			{
				name: "dead without a request (subscription disabled)",
				prepare: func(f *fixture, d domain.Delivery) domain.Delivery {
					d = f.claim(d, base)
					d.Status, d.LastError, d.UpdatedAt = domain.DeliveryDead, "subscription disabled", base
					_, err := f.store.ReleaseDelivery(f.ctx, d)
					require.NoError(f.t, err)
					return wantDelivery(d)
				},
			},
			{
				name: "retrying, postponed by an open circuit and just enqueued",
				prepare: func(f *fixture, d domain.Delivery) domain.Delivery {
					d, _ = f.record(f.claim(d, base), base, outcome{status: domain.DeliveryRetrying, statusCode: 503, next: base.Add(time.Minute), err: "503"})
					d = f.claim(d, base.Add(time.Minute))
					d.Status, d.Reason = domain.DeliveryRetrying, domain.ReasonCircuitOpen
					d.NextAttemptAt, d.UpdatedAt = now.Add(-time.Second), base.Add(time.Minute)
					_, err := f.store.ReleaseDelivery(f.ctx, d)
					require.NoError(f.t, err)
					// The scheduler enqueues it; the retry must clear that
					// mark, or the next scan would skip it for requeueAfter.
					due, err := f.due(now.Add(-time.Second), requeueAfter, 10)
					require.NoError(f.t, err)
					require.Equal(f.t, []string{d.ID}, due)
					return wantDelivery(d)
				},
			},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				f := newFixture(t, newStore)
				e := f.event()
				before := tc.prepare(f, f.fanOut(e, base, f.subscription())[0])

				got, err := f.store.RetryDelivery(f.ctx, before.ID, now)
				require.NoError(t, err)
				want := before
				want.Status = domain.DeliveryRetrying
				want.NextAttemptAt = us(now)
				want.Reason = ""
				want.UpdatedAt = us(now)
				// Attempts, the last status code and error stay: the policy
				// grants one more attempt on top of those made.
				assert.Equal(t, want, got, "the updated delivery is returned")
				stored, err := f.store.GetDelivery(f.ctx, before.ID)
				require.NoError(t, err)
				assert.Equal(t, got, stored, "and stored")
				assertEventStatus(t, f, e.ID, domain.EventPending, "the event is pending again")

				due, err := f.due(now, requeueAfter, 10)
				require.NoError(t, err)
				assert.Equal(t, []string{before.ID}, due, "due at now, enqueued mark cleared")
				_, err = f.store.ClaimDelivery(f.ctx, before.ID, now, leaseMargin(now, now.Add(time.Minute)))
				assert.NoError(t, err, "and claimable at now")
			})
		}
	})

	t.Run("RetryRefusesWhatIsNotDeadOrRetrying", func(t *testing.T) {
		t.Parallel()
		cases := []struct {
			name    string
			prepare func(f *fixture, d domain.Delivery) domain.Delivery
			want    error
		}{
			{
				name:    "pending",
				prepare: func(_ *fixture, d domain.Delivery) domain.Delivery { return d },
				want:    domain.ErrConflict,
			},
			{
				name:    "delivering",
				prepare: func(f *fixture, d domain.Delivery) domain.Delivery { return f.claim(d, base) },
				want:    domain.ErrConflict,
			},
			{
				name: "delivered",
				prepare: func(f *fixture, d domain.Delivery) domain.Delivery {
					d, _ = f.record(f.claim(d, base), base, outcome{status: domain.DeliveryDelivered, statusCode: 200})
					return d
				},
				want: domain.ErrConflict,
			},
			{
				name: "missing",
				prepare: func(_ *fixture, d domain.Delivery) domain.Delivery {
					d.ID = domain.MustNewID(domain.DeliveryIDPrefix, base)
					return d
				},
				want: domain.ErrNotFound,
			},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				f := newFixture(t, newStore)
				e := f.event()
				d := f.fanOut(e, base, f.subscription())[0]
				before := tc.prepare(f, d)
				eventBefore, err := f.store.GetEvent(f.ctx, e.ID)
				require.NoError(t, err)

				_, err = f.store.RetryDelivery(f.ctx, before.ID, base.Add(time.Hour))
				assert.ErrorIs(t, err, tc.want)

				stored, err := f.store.GetDelivery(f.ctx, d.ID)
				require.NoError(t, err)
				if errors.Is(tc.want, domain.ErrConflict) {
					assert.Equal(t, before, stored, "the delivery is unchanged")
				}
				assertEventStatus(t, f, e.ID, eventBefore.Status, "the event is unchanged")
			})
		}
	})

	t.Run("RecoverRetriesTheSubscriptionsDeadDeliveriesSince", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		subA, subB := f.subscription(), f.subscription()
		since := base.Add(time.Hour)
		// Each row is a delivery of an event of its own, settled at at.
		rows := []struct {
			name   string
			sub    domain.Subscription
			status domain.DeliveryStatus
			at     time.Time
			want   bool
		}{
			{name: "died before since", sub: subA, status: domain.DeliveryDead, at: since.Add(-time.Microsecond)},
			{name: "died exactly at since", sub: subA, status: domain.DeliveryDead, at: since, want: true},
			{name: "died after since", sub: subA, status: domain.DeliveryDead, at: since.Add(time.Minute), want: true},
			{name: "died later still", sub: subA, status: domain.DeliveryDead, at: since.Add(50 * time.Minute), want: true},
			{name: "retrying", sub: subA, status: domain.DeliveryRetrying, at: since.Add(time.Minute)},
			{name: "delivered", sub: subA, status: domain.DeliveryDelivered, at: since.Add(time.Minute)},
			{name: "another subscription's dead delivery", sub: subB, status: domain.DeliveryDead, at: since.Add(time.Minute)},
		}
		stored := make([]domain.Delivery, len(rows))
		var want []string
		for i, row := range rows {
			d := f.fanOut(f.event(), base, row.sub)[0]
			stored[i], _ = f.record(f.claim(d, row.at), row.at, outcome{status: row.status, statusCode: 500, next: row.at.Add(time.Hour), err: "500"})
			if row.want {
				want = append(want, d.ID)
			}
		}

		now := since.Add(2 * time.Hour)
		got, err := f.recoverAll(subA.ID, since, now, 2)
		require.NoError(t, err)
		assert.ElementsMatch(t, want, got, "every dead delivery of the subscription that died at or after since")

		due, err := f.due(now, requeueAfter, 100)
		require.NoError(t, err)
		for i, row := range rows {
			d, err := f.store.GetDelivery(f.ctx, stored[i].ID)
			require.NoError(t, err)
			e, err := f.store.GetEvent(f.ctx, d.EventID)
			require.NoError(t, err)
			if !row.want {
				assert.Equal(t, stored[i], d, "%s: unchanged", row.name)
				if row.status == domain.DeliveryDead {
					assert.Equal(t, domain.EventFailed, e.Status, "%s: its event stays failed", row.name)
				}
				continue
			}
			retried := stored[i]
			retried.Status = domain.DeliveryRetrying
			retried.NextAttemptAt = us(now)
			retried.Reason = ""
			retried.UpdatedAt = us(now)
			assert.Equal(t, retried, d, "%s: retried as RetryDelivery does", row.name)
			assert.Equal(t, domain.EventPending, e.Status, "%s: its event is pending again", row.name)
			assert.Contains(t, due, d.ID, "%s: due at now", row.name)
		}

		again, err := f.recoverAll(subA.ID, since, now, 2)
		require.NoError(t, err)
		assert.Empty(t, again, "recovered deliveries are no longer dead")
	})

	t.Run("RecoverUnknownSubscriptionIsNotFound", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		_, err := f.recoverAll(domain.MustNewID(domain.SubscriptionIDPrefix, base), base, base, 10)
		assert.ErrorIs(t, err, domain.ErrNotFound)

		sub := f.subscription()
		got, err := f.recoverAll(sub.ID, base, base, 10)
		require.NoError(t, err, "a subscription with nothing dead")
		assert.Empty(t, got)
	})

	t.Run("ConcurrentRecoveriesRecoverEachDeliveryOnce", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		sub := f.subscription()
		var want []string
		for range 40 {
			d := f.fanOut(f.event(), base, sub)[0]
			f.record(f.claim(d, base), base, outcome{status: domain.DeliveryDead, statusCode: 400})
			want = append(want, d.ID)
		}
		const recoverers = 6
		var wg sync.WaitGroup
		results := make([][]string, recoverers)
		errs := make([]error, recoverers)
		for i := range recoverers {
			wg.Go(func() {
				results[i], errs[i] = f.recoverAll(sub.ID, base, base.Add(time.Hour), 7)
			})
		}
		wg.Wait()
		var all []string
		for i := range recoverers {
			require.NoError(t, errs[i], "recoverer %d", i)
			all = append(all, results[i]...)
		}
		slices.Sort(all)
		slices.Sort(want)
		assert.Equal(t, want, all, "each dead delivery is recovered by exactly one call")
	})

	t.Run("RetryRacingTheLastAttemptLeavesTheEventPending", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		subDead, subLive := f.subscription(), f.subscription()
		// Per event: one dead delivery is retried (or its subscription
		// recovered) while the other's last attempt settles it. Whichever
		// commits first, the event ends pending: a delivery is due again.
		type race struct {
			event domain.Event
			dead  domain.Delivery
			live  domain.Delivery
		}
		var races []race
		for range 12 {
			e := f.event()
			ds := f.fanOut(e, base, subDead, subLive)
			dead, _ := f.record(f.claim(ds[0], base), base, outcome{status: domain.DeliveryDead, statusCode: 400})
			races = append(races, race{event: e, dead: dead, live: f.claim(ds[1], base)})
		}
		var wg sync.WaitGroup
		errs := make(chan error, 2*len(races)+1)
		for _, r := range races[:len(races)/2] {
			wg.Go(func() {
				_, err := f.store.RetryDelivery(f.ctx, r.dead.ID, base.Add(time.Minute))
				errs <- err
			})
		}
		wg.Go(func() {
			// Recovers the dead deliveries of the other half.
			_, err := f.recoverAll(subDead.ID, base, base.Add(time.Minute), 5)
			errs <- err
		})
		for _, r := range races {
			wg.Go(func() {
				d, a := attemptOf(r.live, base, outcome{status: domain.DeliveryDelivered, statusCode: 200})
				_, err := f.store.RecordAttempt(f.ctx, d, a)
				errs <- err
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		for _, r := range races {
			assertEventStatus(t, f, r.event.ID, domain.EventPending, "a retried delivery keeps its event pending")
		}
	})

	t.Run("RecoverWorksInBatchesOfItsLimit", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		sub := f.subscription()
		var dead []string
		for i := range 7 {
			d := f.fanOut(f.event(), base, sub)[0]
			status := domain.DeliveryDead
			if i%3 == 1 {
				status = domain.DeliveryDelivered // interleaved, never recovered
			} else {
				dead = append(dead, d.ID)
			}
			f.record(f.claim(d, base), base, outcome{status: status, statusCode: 400})
		}
		require.Len(t, dead, 5)
		now := base.Add(time.Hour)

		first, err := f.store.RecoverDeliveries(f.ctx, sub.ID, base, now, ports.Page{Limit: 2})
		require.NoError(t, err)
		assert.Equal(t, dead[:2], first.IDs, "a batch recovers at most its limit, in id order")
		assert.Equal(t, dead[1], first.Next, "and says where the next batch starts")
		for _, id := range dead[2:] {
			d, err := f.store.GetDelivery(f.ctx, id)
			require.NoError(t, err)
			assert.Equal(t, domain.DeliveryDead, d.Status, "%s is left to the next batches", id)
		}

		second, err := f.store.RecoverDeliveries(f.ctx, sub.ID, base, now, ports.Page{After: first.Next, Limit: 2})
		require.NoError(t, err)
		assert.Equal(t, dead[2:4], second.IDs)
		last, err := f.store.RecoverDeliveries(f.ctx, sub.ID, base, now, ports.Page{After: second.Next, Limit: 2})
		require.NoError(t, err)
		assert.Equal(t, dead[4:], last.IDs)
		assert.Empty(t, last.Next, "a batch short of its limit is the last")
	})
}

// recoverAll recovers subscriptionID's dead deliveries since, batch at a
// time, as the application does, and returns every id recovered.
func (f *fixture) recoverAll(subscriptionID string, since, now time.Time, batch int) ([]string, error) {
	all := []string{}
	p := ports.Page{Limit: batch}
	for {
		r, err := f.store.RecoverDeliveries(f.ctx, subscriptionID, since, now, p)
		if err != nil {
			return nil, err
		}
		all = append(all, r.IDs...)
		if r.Next == "" {
			return all, nil
		}
		p.After = r.Next
	}
}
