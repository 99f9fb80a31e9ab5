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

// requeueAfter is the scheduler's visibility timeout in these tests.
const requeueAfter = 30 * time.Second

func testScheduler(t *testing.T, newStore func(t *testing.T) ports.Store) {
	t.Run("NewDeliveriesCountAsEnqueued", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		sub := f.subscription()
		d := f.fanOut(f.event(), base, sub)[0]

		due, err := f.due(base.Add(requeueAfter-time.Second), requeueAfter, 10)
		require.NoError(t, err)
		assert.Empty(t, due, "a delivery just appended to the queue is not re-enqueued")

		lost := base.Add(requeueAfter)
		due, err = f.due(lost, requeueAfter, 10)
		require.NoError(t, err)
		assert.Equal(t, []string{d.ID}, due, "a delivery whose append was lost is re-enqueued after requeueAfter")

		due, err = f.due(lost, requeueAfter, 10)
		require.NoError(t, err)
		assert.Empty(t, due, "the scan marks what it returns as enqueued")

		due, err = f.due(lost.Add(requeueAfter), requeueAfter, 10)
		require.NoError(t, err)
		assert.Equal(t, []string{d.ID}, due, "and re-enqueues it again if that append is lost too")
	})

	t.Run("DueRetryIsPickedUpOnTime", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		sub := f.subscription()
		d := f.fanOut(f.event(), base, sub)[0]
		retryAt := base.Add(5 * time.Second)
		// Well inside requeueAfter of the creation-time enqueue: only a
		// cleared mark lets the scan see it.
		f.record(f.claim(d, base), base.Add(time.Second), outcome{status: domain.DeliveryRetrying, statusCode: 500, next: retryAt})

		due, err := f.due(retryAt.Add(-time.Microsecond), requeueAfter, 10)
		require.NoError(t, err)
		assert.Empty(t, due, "not due yet")
		due, err = f.due(retryAt, requeueAfter, 10)
		require.NoError(t, err)
		assert.Equal(t, []string{d.ID}, due, "RecordAttempt cleared the enqueued mark, so the retry is due at once")
	})

	t.Run("ExpiredLeaseIsPickedUp", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		sub := f.subscription()
		d := f.fanOut(f.event(), base, sub)[0]
		lease := base.Add(time.Minute)
		_, err := f.store.ClaimDelivery(f.ctx, d.ID, base, leaseMargin(base, lease))
		require.NoError(t, err)

		due, err := f.due(lease.Add(-time.Second), requeueAfter, 10)
		require.NoError(t, err)
		assert.Empty(t, due, "a delivery under a live lease is not due")
		due, err = f.due(lease, requeueAfter, 10)
		require.NoError(t, err)
		assert.Equal(t, []string{d.ID}, due, "a delivering one whose lease expired (its worker died)")
	})

	t.Run("TerminalDeliveriesAreNeverDue", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		subA, subB := f.subscription(), f.subscription()
		ds := f.fanOut(f.event(), base, subA, subB)
		f.record(f.claim(ds[0], base), base, outcome{status: domain.DeliveryDelivered, statusCode: 200})
		f.record(f.claim(ds[1], base), base, outcome{status: domain.DeliveryDead, statusCode: 410})
		due, err := f.due(base.Add(24*time.Hour), requeueAfter, 10)
		require.NoError(t, err)
		assert.Empty(t, due)
	})

	t.Run("OldestFirstUpToLimit", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		sub := f.subscription()
		var fanouts []ports.FanOut
		var want []domain.Delivery
		for _, offset := range []time.Duration{3, 1, 4, 0, 2} {
			e := f.event()
			d := newDelivery(e, sub, base.Add(offset*time.Second))
			fanouts = append(fanouts, ports.FanOut{EventID: e.ID, Deliveries: []domain.Delivery{d}})
			want = append(want, d)
		}
		_, err := f.store.CreateDeliveries(f.ctx, fanouts)
		require.NoError(t, err)
		slices.SortFunc(want, func(a, b domain.Delivery) int { return a.NextAttemptAt.Compare(b.NextAttemptAt) })

		now := base.Add(time.Hour)
		first, err := f.due(now, requeueAfter, 3)
		require.NoError(t, err)
		assert.Equal(t, ids(want[:3]), first, "oldest NextAttemptAt first, at most limit")
		rest, err := f.due(now, requeueAfter, 3)
		require.NoError(t, err)
		assert.Equal(t, ids(want[3:]), rest)
	})

	t.Run("ConcurrentScansNeverShareADelivery", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		sub := f.subscription()
		const total = 120
		var fanouts []ports.FanOut
		for range total {
			e := f.event()
			fanouts = append(fanouts, ports.FanOut{EventID: e.ID, Deliveries: []domain.Delivery{newDelivery(e, sub, base)}})
		}
		created, err := f.store.CreateDeliveries(f.ctx, fanouts)
		require.NoError(t, err)
		require.Len(t, created, total)

		now := base.Add(requeueAfter + time.Second)
		const scanners = 6
		var wg sync.WaitGroup
		results := make([][]string, scanners)
		errs := make([]error, scanners)
		for i := range scanners {
			wg.Go(func() {
				for {
					due, err := f.due(now, requeueAfter, 7)
					if err != nil || len(due) == 0 {
						errs[i] = err
						return
					}
					results[i] = append(results[i], due...)
				}
			})
		}
		wg.Wait()
		var all []string
		for i := range scanners {
			require.NoError(t, errs[i], "scanner %d", i)
			all = append(all, results[i]...)
		}
		rest, err := f.due(now, requeueAfter, total)
		require.NoError(t, err)
		all = append(all, rest...)
		slices.Sort(all)
		assert.Len(t, slices.Compact(slices.Clone(all)), len(all), "a delivery was returned by two scans")
		slices.Sort(created)
		assert.Equal(t, created, all, "every due delivery is returned exactly once")
	})
}

// due runs the scheduler's scan and returns the ids it made due, checking
// that each comes with its own subscription's id (the key of its entry).
func (f *fixture) due(now time.Time, requeueAfter time.Duration, limit int) ([]string, error) {
	due, err := f.store.DueDeliveries(f.ctx, now, requeueAfter, limit)
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(due))
	for i, d := range due {
		stored, err := f.store.GetDelivery(f.ctx, d.ID)
		if err != nil {
			return nil, err
		}
		assert.Equal(f.t, stored.SubscriptionID, d.SubscriptionID, "the scan returns delivery %s with its subscription", d.ID)
		ids[i] = d.ID
	}
	return ids, nil
}
