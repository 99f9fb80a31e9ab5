package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatch-webhooks/dispatch/adapters/postgres"
	"github.com/dispatch-webhooks/dispatch/adapters/postgres/pgtest"
	"github.com/dispatch-webhooks/dispatch/migrations"
)

func TestMigrate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, provider := migrated(t)
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

// TestIdempotencyKeysMoveToTheirOwnTable: migration 00017 moves every key
// to idempotency_keys with its owner, and back down an event whose key
// another took over gives it up, so the unique index returns.
func TestIdempotencyKeysMoveToTheirOwnTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, provider := migrated(t)
	_, err := provider.DownTo(ctx, 16)
	require.NoError(t, err)
	exec := func(sql string, args ...any) {
		t.Helper()
		_, err := pool.Exec(ctx, sql, args...)
		require.NoError(t, err)
	}
	insert := `INSERT INTO events (id, type, data, idempotency_key, created_at) VALUES ($1, 'a', '{}', $2, $3)`
	old := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	exec(insert, "evt_keyed", "order-1", old)
	exec(insert, "evt_plain", nil, old)

	_, err = provider.UpTo(ctx, 17)
	require.NoError(t, err)
	var owner string
	var since time.Time
	require.NoError(t, pool.QueryRow(ctx, `SELECT event_id, created_at FROM idempotency_keys WHERE key = 'order-1'`).Scan(&owner, &since))
	assert.Equal(t, "evt_keyed", owner)
	assert.True(t, since.Equal(old))
	var keys int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys`).Scan(&keys))
	assert.Equal(t, 1, keys, "only keyed events have a row")

	// A later event takes the expired key over.
	exec(insert, "evt_later", "order-1", old.Add(48*time.Hour))
	exec(`UPDATE idempotency_keys SET event_id = 'evt_later', created_at = $1 WHERE key = 'order-1'`, old.Add(48*time.Hour))

	_, err = provider.DownTo(ctx, 16)
	require.NoError(t, err)
	kept := map[string]string{}
	rows, err := pool.Query(ctx, `SELECT id, coalesce(idempotency_key, '') FROM events`)
	require.NoError(t, err)
	for rows.Next() {
		var id, key string
		require.NoError(t, rows.Scan(&id, &key))
		kept[id] = key
	}
	require.NoError(t, rows.Err())
	assert.Equal(t, map[string]string{"evt_keyed": "", "evt_plain": "", "evt_later": "order-1"}, kept)
	_, err = pool.Exec(ctx, insert, "evt_dup", "order-1", old)
	assert.Error(t, err, "the unique index is back")
	_, err = provider.UpTo(ctx, 17)
	require.NoError(t, err)
}

// migrated is a migrated database of t's own, and the goose provider of
// its migrations, to move it up and down.
func migrated(t *testing.T) (*pgxpool.Pool, *goose.Provider) {
	t.Helper()
	pool := pgtest.NewPool(t)
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { _ = db.Close() })
	provider, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS)
	require.NoError(t, err)
	return pool, provider
}
