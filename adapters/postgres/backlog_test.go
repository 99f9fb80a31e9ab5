package postgres_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatch-webhooks/dispatch/adapters/postgres"
	"github.com/dispatch-webhooks/dispatch/adapters/postgres/pgtest"
	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
	"github.com/dispatch-webhooks/dispatch/ports/storetest"
)

func TestBacklogOnPostgres(t *testing.T) {
	t.Parallel()
	storetest.RunBacklog(t, func(t *testing.T) storetest.BacklogStore { return postgres.New(pgtest.NewPool(t)) })
}

// TestTableUsageCountsTheHistoryTables: every history table is reported,
// the events stored counted once the statistics know them, and bytes for
// each.
func TestTableUsageCountsTheHistoryTables(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	store := postgres.New(pool)
	now := time.Now()
	for range 40 {
		e := domain.Event{ID: domain.MustNewID(domain.EventIDPrefix, now), Type: "a", Data: json.RawMessage(`{"n":1}`), CreatedAt: now}
		_, _, err := store.CreateEvent(t.Context(), e, now.Add(-time.Hour))
		require.NoError(t, err)
	}
	_, err := pool.Exec(t.Context(), "ANALYZE events")
	require.NoError(t, err)

	usage, err := store.TableUsage(t.Context())
	require.NoError(t, err)
	byTable := map[string]ports.TableUsage{}
	for _, u := range usage {
		byTable[u.Table] = u
	}
	require.Len(t, byTable, 3, "events, deliveries and attempts: %+v", usage)
	assert.Equal(t, int64(40), byTable["events"].Rows)
	assert.Zero(t, byTable["deliveries"].Rows)
	for table, u := range byTable {
		assert.Positive(t, u.Bytes, "table %s takes space (its indexes at least)", table)
	}
}
