package storetest

import (
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

	t.Run("UnfannedEventsOldestFirst", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		sub := f.subscription()
		at := func(d time.Duration) domain.Event {
			return f.event(func(e *domain.Event) {
				e.CreatedAt = base.Add(d)
				e.ID = domain.MustNewID(domain.EventIDPrefix, e.CreatedAt)
			})
		}
		// Created out of order, to show the order is by creation time.
		third := at(-1 * time.Minute)
		first := at(-3 * time.Minute)
		fannedOut := at(-4 * time.Minute)
		second := at(-2 * time.Minute)
		nothingToDo := at(-5 * time.Minute)
		atCutoff := at(0)
		at(time.Minute) // too young

		f.fanOut(fannedOut, base, sub)
		_, err := f.store.CreateDeliveries(f.ctx, []ports.FanOut{{EventID: nothingToDo.ID}})
		require.NoError(t, err)

		got, err := f.store.UnfannedEvents(f.ctx, base, 10)
		require.NoError(t, err)
		assert.Equal(t, []string{first.ID, second.ID, third.ID}, got,
			"events created before olderThan and never fanned out, oldest first")
		assert.NotContains(t, got, atCutoff.ID, "olderThan is exclusive")

		got, err = f.store.UnfannedEvents(f.ctx, base, 2)
		require.NoError(t, err)
		assert.Equal(t, []string{first.ID, second.ID}, got, "limit")
	})
}
