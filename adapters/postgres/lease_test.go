package postgres_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dispatch-webhooks/dispatch/domain"
)

// TestClaimIsAHeapOnlyUpdate guards migration 00006: a claim writes only
// columns no index covers (lease_until, updated_at) into a table with free
// space on its pages, so PostgreSQL updates the row without touching any
// index. An index that came to cover either column would make every claim
// write an entry into every index of deliveries again.
func TestClaimIsAHeapOnlyUpdate(t *testing.T) {
	t.Parallel()
	f := newWorkerFixture(t)
	// Every fourth of 100 deliveries: a few claims per page, which the
	// free space of a page holds (more, before PostgreSQL prunes the old
	// row versions, spill to other pages).
	var ds []domain.Delivery
	for i, d := range f.deliveries(t, 100, nil) {
		if i%4 == 0 {
			ds = append(ds, d)
		}
	}
	hot := func() (updates, heapOnly int64) {
		t.Helper()
		_, err := f.pool.Exec(t.Context(), "SELECT pg_stat_force_next_flush()")
		require.NoError(t, err)
		err = f.pool.QueryRow(t.Context(),
			`SELECT coalesce(sum(n_tup_upd), 0)::bigint, coalesce(sum(n_tup_hot_upd), 0)::bigint FROM pg_stat_user_tables WHERE relname LIKE 'deliveries\_%'`).Scan(&updates, &heapOnly)
		require.NoError(t, err)
		return updates, heapOnly
	}
	updatesBefore, hotBefore := hot()
	for _, d := range ds {
		// Later than the deliveries were made, so updated_at changes.
		_, err := f.store.ClaimDelivery(t.Context(), d.ID, f.now.Add(time.Second), 5*time.Second)
		require.NoError(t, err)
	}
	// The statistics reach the view asynchronously; give them a moment.
	deadline := time.Now().Add(workerWait)
	for {
		updates, heapOnly := hot()
		claims, hotClaims := updates-updatesBefore, heapOnly-hotBefore
		if claims >= int64(len(ds)) {
			require.Equal(t, int64(len(ds)), hotClaims,
				"%d of %d claims were heap-only updates", hotClaims, claims)
			return
		}
		require.True(t, time.Now().Before(deadline), "statistics showed %d of %d claims", claims, len(ds))
		time.Sleep(20 * time.Millisecond)
	}
}
