package postgres_test

import (
	"testing"

	"github.com/dispatch-webhooks/dispatch/adapters/postgres"
	"github.com/dispatch-webhooks/dispatch/adapters/postgres/pgtest"
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
