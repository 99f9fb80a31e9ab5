package postgres_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatch-webhooks/dispatch/adapters/postgres"
	"github.com/dispatch-webhooks/dispatch/adapters/postgres/pgtest"
	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/migrations"
)

// TestPartitionMigrationKeepsAMillionDeliveries: migration 00018 turns
// populated tables (250,000 events, 1,000,000 deliveries, 100,000
// attempts) into partitioned ones without losing or changing a row, the
// store works on the new layout, and the Down section brings the plain
// tables back with every row. It logs how long the Up took
// (docs/operations.md quotes it).
func TestPartitionMigrationKeepsAMillionDeliveries(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, err := postgres.Connect(ctx, pgtest.NewDatabase(t))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { _ = db.Close() })
	provider, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS)
	require.NoError(t, err)
	_, err = provider.DownTo(ctx, 17)
	require.NoError(t, err)

	const events, perEvent, attempts = 250_000, 4, 100_000
	exec := func(sql string) {
		t.Helper()
		_, err := pool.Exec(ctx, sql)
		require.NoError(t, err)
	}
	started := time.Now()
	exec(`SET statement_timeout = 0`)
	exec(`INSERT INTO subscriptions (id, url, event_types, secret, rate_limit, max_in_flight, timeout, retry_policy, created_at, updated_at)
		SELECT 'sub_0000000000000000000000000' || s, 'https://hooks.example.com/' || s, '{*}', 'whsec_x', 10, 10, '10s', '{}', now(), now()
		FROM generate_series(0, 3) AS s`)
	// Ids of legacy form: ULIDs of a past time, so below the bound.
	exec(`INSERT INTO events (id, type, data, fanned_out_at, created_at)
		SELECT 'evt_00' || lpad(i::text, 24, '0'), 'order.created', convert_to('{"n":' || i || '}', 'UTF8'),
		       CASE WHEN i % 1000 = 0 THEN NULL ELSE now() END, now()
		FROM generate_series(1, 250000) AS i`)
	exec(`INSERT INTO deliveries (id, event_id, subscription_id, status, attempts, next_attempt_at, ordering_key, created_at, updated_at)
		SELECT 'dlv_00' || lpad(i::text, 24, '0'), 'evt_00' || lpad((i / 4 + 1)::text, 24, '0'),
		       'sub_0000000000000000000000000' || (i % 4),
		       CASE WHEN i % 100 = 0 THEN 'retrying' WHEN i % 7 = 0 THEN 'dead' ELSE 'delivered' END,
		       1, now(), CASE WHEN i % 10 = 0 THEN 'k' || (i % 50) ELSE '' END, now(), now()
		FROM generate_series(0, 999999) AS i`)
	exec(`INSERT INTO attempts (delivery_id, subscription_id, attempt, status_code, response_body, duration, created_at)
		SELECT 'dlv_00' || lpad((i * 10)::text, 24, '0'), 'sub_0000000000000000000000000' || (i * 10 % 4), 1, 500, '\x6e6f7065', '1s', now()
		FROM generate_series(0, 99999) AS i`)
	exec(`ANALYZE events, deliveries, attempts`)
	t.Logf("populated %d events, %d deliveries, %d attempts in %s", events, events*perEvent, attempts, time.Since(started).Round(time.Millisecond))

	fingerprint := func() (counts [3]int64, sums [3]string) {
		t.Helper()
		require.NoError(t, pool.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM events), (SELECT count(*) FROM deliveries), (SELECT count(*) FROM attempts),
			(SELECT md5(string_agg(e::text, ',' ORDER BY id)) FROM events e WHERE id < 'evt_00000000000000000000001000'),
			(SELECT md5(string_agg(d::text, ',' ORDER BY id)) FROM deliveries d WHERE id >= 'dlv_00000000000000000000500000' AND id < 'dlv_00000000000000000000504000'),
			(SELECT md5(string_agg(a::text, ',' ORDER BY delivery_id)) FROM attempts a WHERE delivery_id < 'dlv_00000000000000000000040000')`).
			Scan(&counts[0], &counts[1], &counts[2], &sums[0], &sums[1], &sums[2]))
		return counts, sums
	}
	countsBefore, sumsBefore := fingerprint()
	require.Equal(t, [3]int64{events, events * perEvent, attempts}, countsBefore)

	started = time.Now()
	_, err = provider.UpTo(ctx, 18)
	require.NoError(t, err)
	took := time.Since(started)
	t.Logf("migration 00018 on %d events, %d deliveries, %d attempts took %s", events, events*perEvent, attempts, took.Round(time.Millisecond))

	counts, sums := fingerprint()
	assert.Equal(t, countsBefore, counts, "every row is kept")
	assert.Equal(t, sumsBefore, sums, "and unchanged")
	var kind string
	require.NoError(t, pool.QueryRow(ctx, `SELECT relkind::text FROM pg_class WHERE relname = 'deliveries'`).Scan(&kind))
	assert.Equal(t, "p", kind, "deliveries is partitioned")

	// The store works on the new layout, once it has windows.
	store := postgres.New(pool)
	now := time.Now().UTC()
	_, err = store.MaintainHistory(ctx, now, domain.DefaultRetention)
	require.NoError(t, err)
	f := historyFixture{pool: pool, store: store, sub: historySubscription(t, store, now), now: now}
	e, d := f.delivery(t, now, domain.DeliveryRetrying)
	claimed, err := store.ClaimDelivery(ctx, d.ID, now.Add(2*time.Hour), time.Second)
	require.NoError(t, err)
	assert.Equal(t, e.ID, claimed.Event.ID)
	_, err = store.GetDelivery(ctx, "dlv_00000000000000000000000400")
	require.NoError(t, err, "a legacy delivery reads")
	var newPartition string
	require.NoError(t, pool.QueryRow(ctx, `SELECT tableoid::regclass::text FROM deliveries WHERE id = $1`, d.ID).Scan(&newPartition))
	assert.NotEqual(t, "deliveries_legacy", newPartition, "a new delivery lands in a window")

	_, err = provider.DownTo(ctx, 17)
	require.NoError(t, err)
	counts, sums = fingerprint()
	assert.Equal(t, [3]int64{events + 1, events*perEvent + 1, attempts + 1}, counts, "down keeps every row, the new ones too")
	assert.Equal(t, sumsBefore, sums)
	_, err = pool.Exec(ctx, `INSERT INTO deliveries (id, event_id, subscription_id, status, next_attempt_at, created_at, updated_at)
		VALUES ('dlv_dup', 'evt_00000000000000000000000001', 'sub_00000000000000000000000000', 'pending', now(), now(), now())`)
	assert.ErrorContains(t, err, "deliveries_event_id_subscription_id_key", "the unique pair is back")
}

// TestPartitionMigrationDownAfterTheLegacyWindowWasDropped: once the
// retention dropped the legacy partitions, the Down section makes them
// again and still keeps every row of the later windows.
func TestPartitionMigrationDownAfterTheLegacyWindowWasDropped(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	f := newHistoryFixture(t)
	later := f.now.Add(2 * time.Hour)
	done, err := f.store.MaintainHistory(ctx, later, time.Minute)
	require.NoError(t, err)
	require.Equal(t, 1, done.Dropped, "the legacy window")
	e, d := f.delivery(t, later, domain.DeliveryRetrying)

	db := stdlib.OpenDBFromPool(f.pool)
	t.Cleanup(func() { _ = db.Close() })
	provider, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS)
	require.NoError(t, err)
	_, err = provider.DownTo(ctx, 17)
	require.NoError(t, err)
	var events, deliveries, attempts int
	require.NoError(t, f.pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM events WHERE id = $1), (SELECT count(*) FROM deliveries WHERE id = $2),
		(SELECT count(*) FROM attempts WHERE delivery_id = $2)`, e.ID, d.ID).Scan(&events, &deliveries, &attempts))
	assert.Equal(t, [3]int{1, 1, 1}, [3]int{events, deliveries, attempts})
	var unique bool
	require.NoError(t, f.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_constraint
		WHERE conname = 'deliveries_event_id_subscription_id_key')`).Scan(&unique))
	assert.True(t, unique, "the plain tables are whole again")
}
