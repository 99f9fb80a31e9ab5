package postgres_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatch-webhooks/dispatch/adapters/postgres/pgtest"
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
	assert.Contains(t, rejected.Reasons[fanouts[1].EventID], "its deliveries cannot be stored: invalid byte sequence", "the reason, as the event's failure_reason will read")
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

// first_in_line (migration 00014) matches an unfanned event's type and
// resolves its key in SQL; both must agree with the domain's rules
// (domain.MatchType, domain.OrderingKeyFor), which fan-out applies.
func TestFirstInLineSharesTheDomainsRules(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	patterns := [][]string{{"*"}, {"order.*"}, {"order.created"}, {"order"}, {"orders.*", "invoice.paid"}, {"order.item.*"}}
	types := []string{"order", "order.created", "orders.created", "order.item.added", "invoice.paid", "order.", "a"}
	for _, p := range patterns {
		for _, typ := range types {
			var got bool
			require.NoError(t, pool.QueryRow(t.Context(), "SELECT event_type_matches($1, $2)", p, typ).Scan(&got))
			assert.Equal(t, domain.Subscription{EventTypes: p}.Matches(typ), got, "%v matching %q", p, typ)
		}
	}
	for _, key := range []string{"", "k1", "é", strings.Repeat("k", 256), strings.Repeat("k", 257), strings.Repeat("é", 200)} {
		var got string
		require.NoError(t, pool.QueryRow(t.Context(), "SELECT ordering_key_text($1)", key).Scan(&got))
		want := domain.OrderingKeyFor(domain.Subscription{OrderingKey: "/ordering_key"}, domain.Event{OrderingKey: key})
		assert.Equal(t, want, got, "key of %d bytes", len(key))
	}
}
