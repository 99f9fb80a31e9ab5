package postgres_test

import (
	"testing"

	"github.com/dispatch-webhooks/dispatch/adapters/postgres"
	"github.com/dispatch-webhooks/dispatch/adapters/postgres/pgtest"
	"github.com/dispatch-webhooks/dispatch/ports/storetest"
)

func TestBacklogOnPostgres(t *testing.T) {
	t.Parallel()
	storetest.RunBacklog(t, func(t *testing.T) storetest.BacklogStore { return postgres.New(pgtest.NewPool(t)) })
}
