package postgres_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	"github.com/dispatch-webhooks/dispatch/adapters/postgres"
	"github.com/dispatch-webhooks/dispatch/adapters/postgres/pgtest"
	"github.com/dispatch-webhooks/dispatch/migrations"
)

func TestMigrate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)

	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { _ = db.Close() })
	provider, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS)
	require.NoError(t, err)
	latest, err := provider.GetDBVersion(ctx)
	require.NoError(t, err)
	require.Positive(t, latest, "the template database should be migrated")

	// Down to nothing proves every Down section works, and leaves an empty
	// schema for Migrate to apply from scratch.
	_, err = provider.DownTo(ctx, 0)
	require.NoError(t, err)
	var tables int
	require.NoError(t, pool.QueryRow(ctx,
		`SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND tablename IN ('subscriptions', 'events', 'deliveries', 'attempts')`).Scan(&tables))
	require.Zero(t, tables, "down migrations should drop every table")

	require.NoError(t, postgres.Migrate(ctx, pool))
	version, err := provider.GetDBVersion(ctx)
	require.NoError(t, err)
	require.Equal(t, latest, version)
	require.NoError(t, pool.QueryRow(ctx,
		`SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND tablename IN ('subscriptions', 'events', 'deliveries', 'attempts')`).Scan(&tables))
	require.Equal(t, 4, tables)

	// Identifiers and keys compare byte for byte (migration 00008).
	var notC []string
	require.NoError(t, pool.QueryRow(ctx, `
		SELECT coalesce(array_agg(table_name || '.' || column_name), '{}') FROM information_schema.columns
		WHERE table_schema = 'public' AND (table_name, column_name) IN (
			('subscriptions', 'id'), ('events', 'id'), ('events', 'idempotency_key'),
			('deliveries', 'id'), ('deliveries', 'event_id'), ('deliveries', 'subscription_id'),
			('deliveries', 'ordering_key'), ('attempts', 'delivery_id'), ('attempts', 'subscription_id'))
		AND collation_name IS DISTINCT FROM 'C'`).Scan(&notC))
	require.Empty(t, notC, "these columns should have collation \"C\"")

	// Re-running is a no-op.
	require.NoError(t, postgres.Migrate(ctx, pool))
	pending, err := provider.HasPending(ctx)
	require.NoError(t, err)
	require.False(t, pending)
	version, err = provider.GetDBVersion(ctx)
	require.NoError(t, err)
	require.Equal(t, latest, version)
}
