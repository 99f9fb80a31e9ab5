package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// testFanOutFailures checks SPEC §2's isolation of fan-out: a fan-out the
// store refuses fails alone, and an event that cannot be fanned out is
// settled as failed after its tries instead of holding anything back.
func testFanOutFailures(t *testing.T, newStore func(t *testing.T) ports.Store) {
	t.Run("RefusedFanOutFailsAlone", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		sub := f.subscription()
		taken := f.fanOut(f.event(), base, sub)[0]
		before, bad, after := f.event(), f.event(), f.event()
		clash := newDelivery(bad, sub, base)
		clash.ID = taken.ID // a delivery id that exists: refused by every store
		batch := []ports.FanOut{
			{EventID: before.ID, Deliveries: []domain.Delivery{newDelivery(before, sub, base)}},
			{EventID: bad.ID, Deliveries: []domain.Delivery{clash}},
			{EventID: after.ID, Deliveries: []domain.Delivery{newDelivery(after, sub, base)}},
		}

		created, err := f.store.CreateDeliveries(f.ctx, batch)
		var rejected *ports.RejectedFanOuts
		require.True(t, errors.As(err, &rejected), "err = %v, want a *ports.RejectedFanOuts", err)
		assert.Len(t, rejected.Reasons, 1, "only the refused event: %v", rejected.Reasons)
		assert.NotEmpty(t, rejected.Reasons[bad.ID], "the refused event, with a reason")
		assert.ElementsMatch(t, []string{batch[0].Deliveries[0].ID, batch[2].Deliveries[0].ID}, created,
			"its batch-mates' deliveries are created")
		for _, e := range []domain.Event{before, after} {
			ds, err := f.store.EventDeliveries(f.ctx, e.ID, everyDelivery)
			require.NoError(t, err)
			assert.Len(t, ds, 1, "event %s is fanned out", e.ID)
		}
		unfanned, err := f.store.UnfannedEvents(f.ctx, base.Add(time.Hour), time.Minute, 10)
		require.NoError(t, err)
		assert.Equal(t, []string{bad.ID}, unfanned, "the refused event is left unfanned, and it alone")
	})

	t.Run("EventSettledFailedAfterItsTries", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		e := f.event()
		now := base.Add(time.Minute)
		for try := 1; try < 3; try++ {
			settled, err := f.store.FailFanOut(f.ctx, e.ID, "refused", now, 3)
			require.NoError(t, err)
			assert.False(t, settled, "try %d of 3 does not settle", try)
			got, err := f.store.GetEvent(f.ctx, e.ID)
			require.NoError(t, err)
			assert.Equal(t, domain.EventPending, got.Status, "pending while it has tries left")
			assert.Empty(t, got.FailureReason)
		}
		unfanned, err := f.store.UnfannedEvents(f.ctx, base.Add(time.Hour), time.Minute, 10)
		require.NoError(t, err)
		assert.Equal(t, []string{e.ID}, unfanned, "swept again while it has tries left")

		settled, err := f.store.FailFanOut(f.ctx, e.ID, "ordering key: invalid byte sequence", now, 3)
		require.NoError(t, err)
		assert.True(t, settled, "the third try settles it")
		got, err := f.store.GetEvent(f.ctx, e.ID)
		require.NoError(t, err)
		assert.Equal(t, domain.EventFailed, got.Status)
		assert.Equal(t, "ordering key: invalid byte sequence", got.FailureReason)
		unfanned, err = f.store.UnfannedEvents(f.ctx, base.Add(2*time.Hour), time.Minute, 10)
		require.NoError(t, err)
		assert.Empty(t, unfanned, "a settled event is never swept again")

		settled, err = f.store.FailFanOut(f.ctx, e.ID, "again", now, 3)
		require.NoError(t, err)
		assert.False(t, settled, "a settled event stays as it is")
		created, err := f.store.CreateDeliveries(f.ctx, []ports.FanOut{{EventID: e.ID, Deliveries: []domain.Delivery{newDelivery(e, f.subscription(), now)}}})
		require.NoError(t, err)
		assert.Empty(t, created, "a settled event is fanned out: nothing more is created for it")
		got, err = f.store.GetEvent(f.ctx, e.ID)
		require.NoError(t, err)
		assert.Equal(t, "ordering key: invalid byte sequence", got.FailureReason, "the first settlement's reason stays")

		_, err = f.store.FailFanOut(f.ctx, "evt_nope", "x", now, 3)
		assert.ErrorIs(t, err, domain.ErrNotFound)
	})
}
