package postgres_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dispatch-webhooks/dispatch/adapters/postgres"
	"github.com/dispatch-webhooks/dispatch/adapters/postgres/pgtest"
	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
	"github.com/dispatch-webhooks/dispatch/ports/storetest"
)

// TestStore runs the contract suite on the Store as deployed: the worker's
// batch statements prepared on a BatchPool.
func TestStore(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) ports.Store {
		pool, batch := pgtest.NewPools(t)
		return postgres.New(pool, postgres.BatchPool(batch))
	})
}

// TestStoreWithoutBatchPool runs it on a Store that plans the batch
// statements for every batch, on its one pool, and seals subscriptions'
// secrets and headers (TestStore stores them in the clear), so every read
// path of the contract opens what it reads. Not alongside TestStore:
// the two suites' parallel subtests together would hold more connections
// than PostgreSQL's default max_connections of 100 allows.
func TestStoreWithoutBatchPool(t *testing.T) {
	storetest.Run(t, func(t *testing.T) ports.Store {
		return postgres.New(pgtest.NewPool(t), postgres.Encryption(testRing(t, 1)))
	})
}

// TestRetention runs the retention contract on a Store whose history is
// in windows (no open-ended partition), made for the test's first few
// minutes.
func TestRetention(t *testing.T) {
	t.Parallel()
	storetest.RunRetention(t, func(t *testing.T, now time.Time, retention time.Duration) storetest.RetentionStore {
		pool, err := postgres.Connect(t.Context(), pgtest.NewDatabase(t))
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		store := postgres.New(pool)
		// Windows from now until past now + retention: each call makes
		// two windows ahead of its time and drops nothing that young.
		for at := now; !at.After(now.Add(retention)); at = at.Add(domain.RetentionWindow(retention)) {
			_, err := store.MaintainHistory(t.Context(), at, retention)
			require.NoError(t, err)
		}
		return store
	})
}
