package storetest

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

func testEvents(t *testing.T, newStore func(t *testing.T) ports.Store) {
	t.Run("CreateThenGetKeepsDataByteForByte", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		e := newEvent(base)
		// Key order, number spelling, escapes and non-ASCII text all survive:
		// a receiver may check the body against what the producer sent.
		e.Data = []byte(`{"z":1,"a":[1.0,2e3,-0],"s":"\u00e9\n\"q\"","é":null,"nested":{"b":true,"a":false}}`)
		e.OrderingKey = "customer-42"
		e.IdempotencyKey = "req-1"
		stored, created, err := f.store.CreateEvent(f.ctx, e, base.Add(-time.Hour))
		require.NoError(t, err)
		assert.True(t, created)
		assert.Equal(t, wantEvent(e), stored, "CreateEvent returns the event as stored")

		got, err := f.store.GetEvent(f.ctx, e.ID)
		require.NoError(t, err)
		assert.Equal(t, wantEvent(e), got)
		assert.Equal(t, string(e.Data), string(got.Data))
		assert.Equal(t, domain.EventPending, got.Status)
	})

	t.Run("CreateWithExistingIDIsConflict", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		e := f.event()
		dup := newEvent(base)
		dup.ID = e.ID
		dup.Type = "order.cancelled"
		_, _, err := f.store.CreateEvent(f.ctx, dup, base.Add(-time.Hour))
		require.ErrorIs(t, err, domain.ErrConflict)
		got, err := f.store.GetEvent(f.ctx, e.ID)
		require.NoError(t, err)
		assert.Equal(t, e, got, "the first event is unchanged")
	})

	t.Run("MissingIsNotFound", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		_, err := f.store.GetEvent(f.ctx, domain.MustNewID(domain.EventIDPrefix, base))
		assert.ErrorIs(t, err, domain.ErrNotFound)
	})

	t.Run("IdempotencyKeyReturnsTheFirstEvent", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		first := f.event(func(e *domain.Event) { e.IdempotencyKey = "order-77" })

		again := newEvent(base.Add(time.Minute))
		again.IdempotencyKey = "order-77"
		again.Data = []byte(`{"different":true}`)
		stored, created, err := f.store.CreateEvent(f.ctx, again, base.Add(-time.Minute))
		require.NoError(t, err)
		assert.False(t, created)
		assert.Equal(t, first, stored, "the earlier event is returned unchanged")
		_, err = f.store.GetEvent(f.ctx, again.ID)
		assert.ErrorIs(t, err, domain.ErrNotFound, "nothing was stored for the repeat")

		other := newEvent(base.Add(time.Minute))
		other.IdempotencyKey = "order-78"
		_, created, err = f.store.CreateEvent(f.ctx, other, base)
		require.NoError(t, err)
		assert.True(t, created, "another key is another event")

		for range 2 {
			unkeyed := newEvent(base.Add(time.Minute))
			_, created, err = f.store.CreateEvent(f.ctx, unkeyed, base)
			require.NoError(t, err)
			assert.True(t, created, "events without a key are never deduplicated")
		}
	})

	t.Run("IdempotencyKeyExpiresAfterKeptSince", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		first := f.event(func(e *domain.Event) { e.IdempotencyKey = "nightly-export" })

		// keptSince at the first event's creation: it was not stored
		// *after* keptSince, so the key is free again.
		second := newEvent(base.Add(24 * time.Hour))
		second.IdempotencyKey = "nightly-export"
		stored, created, err := f.store.CreateEvent(f.ctx, second, base)
		require.NoError(t, err)
		assert.True(t, created, "an expired key does not deduplicate")
		assert.Equal(t, second.ID, stored.ID)

		_, err = f.store.GetEvent(f.ctx, first.ID)
		assert.NoError(t, err, "the expired key's event stays")

		third := newEvent(base.Add(25 * time.Hour))
		third.IdempotencyKey = "nightly-export"
		stored, created, err = f.store.CreateEvent(f.ctx, third, base.Add(time.Hour))
		require.NoError(t, err)
		assert.False(t, created)
		assert.Equal(t, second.ID, stored.ID, "the key now answers with the second event")
	})

	t.Run("ExpiredIdempotencyKeysAreFreedOldestFirst", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		var keyed []domain.Event
		for i := range 5 {
			e := newEvent(base.Add(time.Duration(i) * time.Minute))
			e.IdempotencyKey = fmt.Sprintf("expiring-%d", i)
			stored, created, err := f.store.CreateEvent(f.ctx, e, base.Add(-time.Hour))
			require.NoError(t, err)
			require.True(t, created)
			keyed = append(keyed, stored)
		}
		unkeyed := f.event()

		// Windows ended for the first four (created at or before
		// base+3m); two freed at a time, oldest first.
		keptSince := base.Add(3 * time.Minute)
		n, err := f.store.ExpireIdempotencyKeys(f.ctx, keptSince, 2)
		require.NoError(t, err)
		assert.Equal(t, 2, n)
		n, err = f.store.ExpireIdempotencyKeys(f.ctx, keptSince, 10)
		require.NoError(t, err)
		assert.Equal(t, 2, n, "the next two; the fifth's window has not ended")
		n, err = f.store.ExpireIdempotencyKeys(f.ctx, keptSince, 10)
		require.NoError(t, err)
		assert.Zero(t, n, "nothing left to free")

		for i, e := range keyed {
			got, err := f.store.GetEvent(f.ctx, e.ID)
			require.NoError(t, err, "a freed key's event stays")
			assert.Equal(t, e.IdempotencyKey, got.IdempotencyKey, "event %d tells the key it was published with", i)
		}
		_, err = f.store.GetEvent(f.ctx, unkeyed.ID)
		require.NoError(t, err)

		// A freed key takes a new event even under a window that still
		// covers the old one; a kept key still answers with its event.
		for i, e := range keyed {
			again := newEvent(base.Add(10 * time.Minute))
			again.IdempotencyKey = e.IdempotencyKey
			stored, created, err := f.store.CreateEvent(f.ctx, again, base.Add(-time.Hour))
			require.NoError(t, err)
			if i < 4 {
				assert.True(t, created, "key %d was freed", i)
				assert.Equal(t, again.ID, stored.ID)
			} else {
				assert.False(t, created, "key %d is still in its window", i)
				assert.Equal(t, e.ID, stored.ID)
			}
		}
	})

	t.Run("ConcurrentCreatesWithOneKeyStoreOneEvent", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		const publishers = 50
		type result struct {
			stored  domain.Event
			created bool
			err     error
		}
		results := make([]result, publishers)
		tried := make([]string, publishers)
		var wg sync.WaitGroup
		for i := range publishers {
			e := newEvent(base)
			e.IdempotencyKey = "checkout-9"
			tried[i] = e.ID
			wg.Go(func() {
				stored, created, err := f.store.CreateEvent(f.ctx, e, base.Add(-time.Hour))
				results[i] = result{stored, created, err}
			})
		}
		wg.Wait()
		created := 0
		for i, r := range results {
			require.NoError(t, r.err, "publisher %d", i)
			if r.created {
				created++
			}
			assert.Equal(t, results[0].stored.ID, r.stored.ID, "publisher %d got another event", i)
		}
		assert.Equal(t, 1, created, "exactly one call creates the event")
		got, err := f.store.GetEvents(f.ctx, tried)
		require.NoError(t, err)
		require.Len(t, got, 1, "exactly one event is stored")
		assert.Equal(t, results[0].stored, got[0])
	})

	t.Run("ConcurrentCreatesAreAllStored", func(t *testing.T) {
		t.Parallel()
		// The api role's load: many publishers at once, most without a key.
		// A store may batch them (PostgreSQL group-commits them), but each
		// call must still store its own event and report it.
		f := newFixture(t, newStore)
		const publishers, each = 64, 8
		events := make([]domain.Event, publishers*each)
		for i := range events {
			events[i] = newEvent(base)
			if i%16 == 0 {
				events[i].IdempotencyKey = "concurrent-" + events[i].ID
			}
		}
		var wg sync.WaitGroup
		for p := range publishers {
			wg.Go(func() {
				for _, e := range events[p*each : (p+1)*each] {
					stored, created, err := f.store.CreateEvent(f.ctx, e, base.Add(-time.Hour))
					if !assert.NoError(t, err, "event %s", e.ID) {
						continue
					}
					assert.True(t, created, "event %s", e.ID)
					assert.Equal(t, wantEvent(e), stored, "CreateEvent returns the event as stored")
				}
			})
		}
		wg.Wait()
		ids := make([]string, len(events))
		want := make([]domain.Event, len(events))
		for i, e := range events {
			ids[i], want[i] = e.ID, wantEvent(e)
		}
		got, err := f.store.GetEvents(f.ctx, ids)
		require.NoError(t, err)
		assert.ElementsMatch(t, want, got, "every event is stored once, as given")
	})

	t.Run("ConflictingCreateAmongConcurrentOnesFailsAlone", func(t *testing.T) {
		t.Parallel()
		// However a store batches concurrent creates, one event whose id is
		// taken must fail on its own: the others are stored.
		f := newFixture(t, newStore)
		existing := f.event()
		const publishers = 64
		events := make([]domain.Event, publishers)
		for i := range events {
			events[i] = newEvent(base)
		}
		dup := publishers / 2
		events[dup].ID = existing.ID
		events[dup].Type = "order.cancelled"
		errs := make([]error, publishers)
		var wg sync.WaitGroup
		for i, e := range events {
			wg.Go(func() { _, _, errs[i] = f.store.CreateEvent(f.ctx, e, base.Add(-time.Hour)) })
		}
		wg.Wait()
		var ids []string
		var want []domain.Event
		for i, e := range events {
			if i == dup {
				assert.ErrorIs(t, errs[i], domain.ErrConflict, "the event with a taken id")
				continue
			}
			assert.NoError(t, errs[i], "event %d, beside the conflicting one", i)
			ids = append(ids, e.ID)
			want = append(want, wantEvent(e))
		}
		got, err := f.store.GetEvents(f.ctx, ids)
		require.NoError(t, err)
		assert.ElementsMatch(t, want, got, "every other event is stored")
		got1, err := f.store.GetEvent(f.ctx, existing.ID)
		require.NoError(t, err)
		assert.Equal(t, existing, got1, "the first event with the id is unchanged")
	})

	t.Run("GetEventsReturnsThoseThatExist", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		a, b := f.event(), f.event()
		f.event() // not asked for
		got, err := f.store.GetEvents(f.ctx, []string{b.ID, domain.MustNewID(domain.EventIDPrefix, base), a.ID})
		require.NoError(t, err)
		assert.ElementsMatch(t, []domain.Event{a, b}, got)

		got, err = f.store.GetEvents(f.ctx, nil)
		require.NoError(t, err)
		assert.Empty(t, got)
	})

	t.Run("UnfannedEventsPicksWhatNoSweepTookRecently", func(t *testing.T) {
		t.Parallel()
		// Each case is one event in a store of its own, swept at now.
		now := base.Add(time.Hour)
		cutoff := now.Add(-requeueAfter)
		cases := []struct {
			name    string
			created time.Time
			// pickedAt, when set, is when an earlier sweep picked the event.
			pickedAt time.Time
			// fanOut records the event's fan-out: with a delivery, or with
			// nothing to deliver.
			fanOut   bool
			noTarget bool
			want     bool
		}{
			{name: "created long ago, never picked", created: base, want: true},
			{name: "created exactly requeueAfter ago", created: cutoff, want: true},
			{name: "created within requeueAfter (its append may still be on its way)", created: cutoff.Add(time.Microsecond)},
			{name: "created after now", created: now.Add(time.Second)},
			{name: "picked before the window", created: base, pickedAt: cutoff.Add(-time.Second), want: true},
			{name: "picked exactly requeueAfter ago", created: base, pickedAt: cutoff, want: true},
			{name: "picked within the window", created: base, pickedAt: cutoff.Add(time.Microsecond)},
			{name: "picked at now", created: base, pickedAt: now},
			{name: "fanned out with deliveries", created: base, fanOut: true},
			{name: "fanned out with nothing to deliver", created: base, fanOut: true, noTarget: true},
			{name: "fanned out after a sweep picked it", created: base, pickedAt: cutoff.Add(-time.Second), fanOut: true},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				f := newFixture(t, newStore)
				e := f.event(func(e *domain.Event) {
					e.CreatedAt = tc.created
					e.ID = domain.MustNewID(domain.EventIDPrefix, tc.created)
				})
				if !tc.pickedAt.IsZero() {
					picked, err := f.store.UnfannedEvents(f.ctx, tc.pickedAt, tc.pickedAt.Sub(tc.created), 10)
					require.NoError(t, err)
					require.Equal(t, []string{e.ID}, picked, "the earlier sweep")
				}
				if tc.fanOut {
					fo := ports.FanOut{EventID: e.ID}
					if !tc.noTarget {
						fo.Deliveries = []domain.Delivery{newDelivery(e, f.subscription(), tc.created)}
					}
					_, err := f.store.CreateDeliveries(f.ctx, []ports.FanOut{fo})
					require.NoError(t, err)
				}
				got, err := f.store.UnfannedEvents(f.ctx, now, requeueAfter, 10)
				require.NoError(t, err)
				if tc.want {
					assert.Equal(t, []string{e.ID}, got)
				} else {
					assert.Empty(t, got)
				}
			})
		}
	})

	t.Run("UnfannedEventsOldestFirstUpToLimit", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		at := func(d time.Duration) domain.Event {
			return f.event(func(e *domain.Event) {
				e.CreatedAt = base.Add(d)
				e.ID = domain.MustNewID(domain.EventIDPrefix, e.CreatedAt)
			})
		}
		// Created out of order, to show the order is by creation time.
		third := at(-1 * time.Minute)
		first := at(-3 * time.Minute)
		fourth := at(-30 * time.Second)
		second := at(-2 * time.Minute)

		now := base.Add(time.Hour)
		got, err := f.store.UnfannedEvents(f.ctx, now, requeueAfter, 2)
		require.NoError(t, err)
		assert.Equal(t, []string{first.ID, second.ID}, got, "oldest first, at most limit")
		got, err = f.store.UnfannedEvents(f.ctx, now, requeueAfter, 10)
		require.NoError(t, err)
		assert.Equal(t, []string{third.ID, fourth.ID}, got, "the next sweep goes on where the picked ones end")
		got, err = f.store.UnfannedEvents(f.ctx, now, requeueAfter, 0)
		require.NoError(t, err)
		assert.Empty(t, got, "limit 0")
	})

	t.Run("UnfannedEventsMarksWhatItReturns", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		e := f.event()
		now := base.Add(time.Hour)
		steps := []struct {
			name string
			at   time.Time
			want []string
		}{
			{"the first sweep picks it", now, []string{e.ID}},
			{"the next one does not flood the fan-out with a copy", now, nil},
			{"nor does one within requeueAfter of the pick", now.Add(requeueAfter - time.Microsecond), nil},
			{"its fan-out is overdue requeueAfter after the pick: picked again", now.Add(requeueAfter), []string{e.ID}},
			{"and marked again", now.Add(requeueAfter), nil},
		}
		for _, step := range steps {
			got, err := f.store.UnfannedEvents(f.ctx, step.at, requeueAfter, 10)
			require.NoError(t, err, step.name)
			if step.want == nil {
				assert.Empty(t, got, step.name)
			} else {
				assert.Equal(t, step.want, got, step.name)
			}
		}
		_, err := f.store.CreateDeliveries(f.ctx, []ports.FanOut{{EventID: e.ID}})
		require.NoError(t, err)
		got, err := f.store.UnfannedEvents(f.ctx, now.Add(24*time.Hour), requeueAfter, 10)
		require.NoError(t, err)
		assert.Empty(t, got, "a picked event leaves the outbox once its fan-out is recorded")
	})

	t.Run("ConcurrentSweepsNeverShareAnEvent", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		const total = 120
		var want []string
		for range total {
			want = append(want, f.event().ID)
		}
		now := base.Add(time.Hour)
		const sweepers = 6
		var wg sync.WaitGroup
		results := make([][]string, sweepers)
		errs := make([]error, sweepers)
		for i := range sweepers {
			wg.Go(func() {
				// More sweeps than it takes to drain the outbox alone end a
				// sweeper that keeps getting events (a sweep that does not
				// mark them); the assertions below then report duplicates.
				for range total {
					got, err := f.store.UnfannedEvents(f.ctx, now, requeueAfter, 7)
					if err != nil || len(got) == 0 {
						errs[i] = err
						return
					}
					results[i] = append(results[i], got...)
				}
			})
		}
		wg.Wait()
		var all []string
		for i := range sweepers {
			require.NoError(t, errs[i], "sweeper %d", i)
			all = append(all, results[i]...)
		}
		rest, err := f.store.UnfannedEvents(f.ctx, now, requeueAfter, total)
		require.NoError(t, err)
		all = append(all, rest...)
		slices.Sort(all)
		assert.Len(t, slices.Compact(slices.Clone(all)), len(all), "an event was returned by two sweeps")
		slices.Sort(want)
		assert.Equal(t, want, all, "every unfanned event is returned exactly once")
	})
}
