package postgres_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// An ordering key PostgreSQL's text column cannot hold (a NUL, invalid
// UTF-8: what a payload accepted before ingest refused such strings could
// resolve to) rejects the whole FanOut statement. The event that holds it
// must fail alone: its batch-mates are fanned out, and it is reported.
func TestFanOutOfAnUnstorableKeyFailsAlone(t *testing.T) {
	t.Parallel()
	f := newWorkerFixture(t)
	var fanouts []ports.FanOut
	keys := []string{"c1", "a\x00b", "c2", "\xff"}
	for i, key := range keys {
		e := domain.Event{
			ID: domain.MustNewID(domain.EventIDPrefix, f.now), Type: "order.created", Source: "shop",
			Data: fmt.Appendf(nil, `{"n":%d}`, i), Status: domain.EventPending, CreatedAt: f.now,
		}
		_, _, err := f.store.CreateEvent(t.Context(), e, f.now.Add(-time.Hour))
		require.NoError(t, err)
		d := domain.Delivery{
			ID: domain.MustNewID(domain.DeliveryIDPrefix, f.now), EventID: e.ID, SubscriptionID: f.sub.ID,
			Status: domain.DeliveryPending, NextAttemptAt: f.now, OrderingKey: key, CreatedAt: f.now, UpdatedAt: f.now,
		}
		fanouts = append(fanouts, ports.FanOut{EventID: e.ID, Deliveries: []domain.Delivery{d}})
	}

	created, err := f.store.CreateDeliveries(t.Context(), fanouts)
	var rejected *ports.RejectedFanOuts
	require.True(t, errors.As(err, &rejected), "err = %v, want a *ports.RejectedFanOuts", err)
	assert.ElementsMatch(t, []string{fanouts[1].EventID, fanouts[3].EventID}, keysOf(rejected.Reasons))
	assert.ElementsMatch(t, []string{fanouts[0].Deliveries[0].ID, fanouts[2].Deliveries[0].ID}, created)
	unfanned, err := f.store.UnfannedEvents(t.Context(), f.now.Add(time.Hour), time.Minute, 10)
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{fanouts[1].EventID, fanouts[3].EventID}, unfanned, "the clean events are fanned out")
}

func keysOf[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
