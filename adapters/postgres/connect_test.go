package postgres_test

import (
	"context"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/dispatch-webhooks/dispatch/adapters/postgres"
	"github.com/dispatch-webhooks/dispatch/adapters/postgres/pgtest"
)

// Every session of both pools has a statement_timeout, so no statement
// holds its connection and locks for long whatever its caller's context;
// one the DSN sets wins, and migrations run without any.
func TestEverySessionHasAStatementTimeout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := pgtest.NewDatabase(t)
	show := func(connect func(context.Context, string, ...postgres.ConnectOption) (*pgxpool.Pool, error), dsn string) string {
		t.Helper()
		pool, err := connect(ctx, dsn)
		require.NoError(t, err)
		defer pool.Close()
		var got string
		require.NoError(t, pool.QueryRow(ctx, "SHOW statement_timeout").Scan(&got))
		return got
	}
	require.Equal(t, "30s", show(postgres.Connect, dsn), "the pool's sessions")
	require.Equal(t, "30s", show(postgres.ConnectBatches, dsn), "the batch pool's sessions")

	u, err := url.Parse(dsn)
	require.NoError(t, err)
	q := u.Query()
	q.Set("statement_timeout", "5min")
	u.RawQuery = q.Encode()
	require.Equal(t, "5min", show(postgres.Connect, u.String()), "a statement_timeout in the DSN")
}
