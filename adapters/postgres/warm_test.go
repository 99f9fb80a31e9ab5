package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatch-webhooks/dispatch/adapters/postgres"
	"github.com/dispatch-webhooks/dispatch/adapters/postgres/pgtest"
	"github.com/dispatch-webhooks/dispatch/domain"
)

// prepared counts, per idle connection of pool, how many of marks its
// session has a prepared statement mentioning.
func prepared(t *testing.T, pool *pgxpool.Pool, marks ...string) []int {
	t.Helper()
	ctx := t.Context()
	conns := pool.AcquireAllIdle(ctx)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	counts := make([]int, len(conns))
	for i, c := range conns {
		for _, mark := range marks {
			var n int
			require.NoError(t, c.QueryRow(ctx,
				`SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE '%' || $1 || '%'`, mark).Scan(&n))
			counts[i] += min(n, 1)
		}
	}
	return counts
}

func total(counts []int) int {
	n := 0
	for _, c := range counts {
		n += c
	}
	return n
}

// TestWarmDeliveriesPreparesTheBatchStatementsOnEveryConnection checks
// that after WarmDeliveries every connection of the batch pool is open and
// has ClaimDeliveries, RecordAttempts and ReleaseDeliveries prepared (so a
// worker's first batches neither dial nor plan), and that warming changed
// nothing: a due delivery stays unclaimed and claimable.
func TestWarmDeliveriesPreparesTheBatchStatementsOnEveryConnection(t *testing.T) {
	t.Parallel()
	f := newWorkerFixture(t)
	ctx := t.Context()
	ds := f.deliveries(t, 1, nil)
	marks := []string{"name: ClaimDeliveries", "name: RecordAttempts", "name: ReleaseDeliveries"}

	assert.Zero(t, total(prepared(t, f.batch, marks...)), "nothing is prepared before the warm-up")
	require.NoError(t, f.store.WarmDeliveries(ctx))

	counts := prepared(t, f.batch, marks...)
	require.Len(t, counts, int(f.batch.Config().MaxConns), "every connection of the batch pool is open")
	for i, n := range counts {
		assert.Equal(t, len(marks), n, "connection %d has each batch statement prepared", i)
	}

	got, err := f.store.GetDelivery(ctx, ds[0].ID)
	require.NoError(t, err)
	assert.Equal(t, domain.DeliveryPending, got.Status, "warming claimed nothing")
	assert.Zero(t, got.Attempts)
	claimed, err := f.store.ClaimDelivery(ctx, ds[0].ID, f.now, time.Second)
	require.NoError(t, err, "the delivery is still claimable")
	assert.Equal(t, ds[0].ID, claimed.Delivery.ID)
}

// TestWarmIngestPreparesTheEventInsertOnEachWriter checks that WarmIngest
// opens a connection per event writer with the group commit's statement
// prepared, and stores nothing.
func TestWarmIngestPreparesTheEventInsertOnEachWriter(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	store := postgres.New(pool)
	ctx := t.Context()

	require.NoError(t, store.WarmIngest(ctx))
	assert.Equal(t, postgres.EventWriters, total(prepared(t, pool, "name: InsertEventsFannedOut")),
		"each event writer's connection has the insert prepared")

	var events int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&events))
	assert.Zero(t, events, "warming stored no event")
}

// TestWarmFailsWhenPostgreSQLDoesNotAnswer drives the failure path: an
// ended context (as when the warm-up's time is up) is reported, not
// swallowed, so the caller can log it.
func TestWarmFailsWhenPostgreSQLDoesNotAnswer(t *testing.T) {
	t.Parallel()
	pool, batch := pgtest.NewPools(t)
	store := postgres.New(pool, postgres.BatchPool(batch))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	assert.ErrorIs(t, store.WarmIngest(ctx), context.Canceled)
	assert.ErrorIs(t, store.WarmDeliveries(ctx), context.Canceled)
}

// TestWarmDeliveriesWithoutABatchPoolHasNothingToPrepare: without a
// BatchPool the batch statements are planned per batch, unprepared.
func TestWarmDeliveriesWithoutABatchPoolHasNothingToPrepare(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	store := postgres.New(pool)
	require.NoError(t, store.WarmDeliveries(t.Context()))
	assert.Zero(t, total(prepared(t, pool, "name: ClaimDeliveries")), "no connection prepared a batch statement")
}

// TestWarmFanOutPreparesTheStageReads checks that WarmFanOut opens a
// connection per fan-out handler with the stage's reads prepared, so the
// first events fanned out after a start neither dial nor prepare.
func TestWarmFanOutPreparesTheStageReads(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	store := postgres.New(pool)
	marks := []string{"name: GetEvents", "name: SubscriptionVersion", "name: SubscriptionsChangedSince"}

	assert.Zero(t, total(prepared(t, pool, marks...)), "nothing is prepared before the warm-up")
	require.NoError(t, store.WarmFanOut(t.Context(), 2))

	warmed := 0
	for _, n := range prepared(t, pool, marks...) {
		if n == len(marks) {
			warmed++
		}
	}
	assert.Equal(t, 2, warmed, "two connections have both reads prepared")
}
