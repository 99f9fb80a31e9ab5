package postgres_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatch-webhooks/dispatch/domain"
)

// TestTakeAnswersFromTheEntry checks that a fresh delivery's take reads
// neither its row nor, once read, its event: the rows are changed behind
// the store's back (nothing does that to a reserved delivery or an event)
// and the takes still answer what the entries and the first read told.
func TestTakeAnswersFromTheEntry(t *testing.T) {
	t.Parallel()
	f := newWorkerFixture(t)
	reserved := f.now.Add(time.Minute)
	ds := f.deliveries(t, 8, func(_ int, d *domain.Delivery) { d.ReservedUntil = reserved })
	ids := make([]string, len(ds))
	for i, d := range ds {
		ids[i] = d.ID
	}
	_, err := f.pool.Exec(t.Context(), "UPDATE deliveries SET attempts = 7 WHERE id = ANY($1)", ids)
	require.NoError(t, err)

	// Together, as a worker's takes come: they share a batch or a few.
	taken := make([]domain.Delivery, len(ds))
	events := make([]domain.Event, len(ds))
	var wg sync.WaitGroup
	for i, d := range ds {
		wg.Go(func() {
			c, err := f.store.TakeDelivery(t.Context(), d, f.now, 5*time.Second)
			if assert.NoError(t, err) {
				taken[i], events[i] = c.Delivery, c.Event
				assert.Equal(t, f.sub, c.Subscription)
			}
		})
	}
	wg.Wait()
	for i, d := range ds {
		d.ReservedUntil = time.Time{}
		assert.Equal(t, d, taken[i], "as the entry tells it, not as the row holds it (attempts 7)")
		assert.Equal(t, d.EventID, events[i].ID)
	}

	// Another delivery of the first event: the event comes from what the
	// first take read, not from its row.
	_, err = f.pool.Exec(t.Context(), `UPDATE events SET data = '{"changed":true}' WHERE id = $1`, ds[0].EventID)
	require.NoError(t, err)
	again := ds[0]
	again.ID = domain.MustNewID(domain.DeliveryIDPrefix, f.now)
	again.SubscriptionID = f.second(t).ID
	c, err := f.store.TakeDelivery(t.Context(), again, f.now, 5*time.Second)
	require.NoError(t, err)
	assert.Equal(t, events[0], c.Event)
	assert.JSONEq(t, `{"n":0}`, string(c.Event.Data))
}
