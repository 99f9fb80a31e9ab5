package postgres_test

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatch-webhooks/dispatch/adapters/postgres"
	"github.com/dispatch-webhooks/dispatch/adapters/postgres/pgtest"
	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// TestBatchPlansProbeTheKey checks the plans a BatchPool's sessions cache
// for the worker's batch statements (see postgres.ConnectBatches). The
// generic plan of each is made here while the tables hold a few rows, the
// moment a fresh deployment makes it, and must still be right once
// deliveries holds millions: the batch joined to deliveries by its primary
// key, with no sequential scan, no hash or merge join, no join filter
// (a nested loop comparing every row of the batch with every other), and
// no full scan of another index. Planned normally on tables this small,
// the statements hash-join a sequential scan of deliveries; with
// ClaimDeliveries' status test written as IN ('pending', …), the claim
// scans all of deliveries_due_idx.
func TestBatchPlansProbeTheKey(t *testing.T) {
	t.Parallel()
	f := newWorkerFixture(t)
	ctx := t.Context()

	// One of each statement, so that each is prepared on a connection.
	ds := f.deliveries(t, 2, nil)
	_, err := f.store.ClaimDelivery(ctx, ds[0].ID, f.now, time.Second)
	require.NoError(t, err)
	_, err = f.store.ClaimDelivery(ctx, ds[1].ID, f.now, time.Second)
	require.NoError(t, err)
	delivered := ds[0]
	delivered.Status, delivered.Attempts, delivered.UpdatedAt = domain.DeliveryDelivered, 1, f.now
	_, err = f.store.RecordAttempt(ctx, delivered, domain.Attempt{
		DeliveryID: delivered.ID, Number: 1, StatusCode: 200, Duration: time.Millisecond, CreatedAt: f.now,
	})
	require.NoError(t, err)
	postponed := ds[1]
	postponed.Reason, postponed.NextAttemptAt, postponed.UpdatedAt = "throttled", f.now.Add(time.Second), f.now
	_, err = f.store.ReleaseDelivery(ctx, postponed)
	require.NoError(t, err)

	// A take of a fresh delivery (see takeUnread): the event is read the
	// first time (EventsToTake), the counter alone the second
	// (SubscriptionVersion).
	fresh := f.deliveries(t, 1, func(_ int, d *domain.Delivery) { d.ReservedUntil = f.now.Add(time.Minute) })[0]
	for range 2 {
		_, err = f.store.TakeDelivery(ctx, fresh, f.now, time.Second)
		require.NoError(t, err)
	}

	partitionScan := regexp.MustCompile(`Scan.* on (deliveries_\w+) (deliveries_\d+)$`)
	updateTarget := regexp.MustCompile(`(?m)^\s*Update on (deliveries_\w+) (deliveries_\d+)$`)
	plans := map[string]string{}
	conns := f.batch.AcquireAllIdle(ctx)
	for _, conn := range conns {
		rows, err := conn.Query(ctx, `SELECT name, statement, cardinality(parameter_types) FROM pg_prepared_statements`)
		require.NoError(t, err)
		type prepared struct {
			name, sql string
			params    int
		}
		statements, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (prepared, error) {
			var p prepared
			return p, row.Scan(&p.name, &p.sql, &p.params)
		})
		require.NoError(t, err)
		var mode string
		require.NoError(t, conn.QueryRow(ctx, "SHOW plan_cache_mode").Scan(&mode))
		assert.Equal(t, "force_generic_plan", mode, "the batch pool's sessions plan a statement once")
		for _, p := range statements {
			if !strings.HasPrefix(p.sql, "-- name: ") {
				continue
			}
			query := strings.Fields(p.sql)[2]
			if plans[query] != "" {
				continue
			}
			args := ""
			if p.params > 0 {
				args = "(" + strings.TrimSuffix(strings.Repeat("NULL, ", p.params), ", ") + ")"
			}
			rows, err := conn.Query(ctx, "EXPLAIN (COSTS OFF) EXECUTE "+pgx.Identifier{p.name}.Sanitize()+args, pgx.QueryExecModeSimpleProtocol)
			require.NoError(t, err)
			lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
			require.NoError(t, err)
			plans[query] = strings.Join(lines, "\n")
		}
		conn.Release()
	}

	// A sequential scan, even of a one-row table, is disabled on these
	// sessions, which prices it so high that the statement was compiled
	// (JIT) at every run: 80–150 ms each.
	for _, query := range []string{"EventsToTake", "SubscriptionVersion"} {
		plan, ok := plans[query]
		if assert.Truef(t, ok, "%s is not prepared on the batch pool; prepared there: %v", query, plans) {
			assert.NotContainsf(t, plan, "Seq Scan", "generic plan of %s:\n%s", query, plan)
		}
	}
	for _, query := range []string{"ClaimDeliveries", "RecordAttempts", "ReleaseDeliveries"} {
		plan, ok := plans[query]
		if !assert.Truef(t, ok, "%s is not prepared on the batch pool; prepared there: %v", query, plans) {
			continue
		}
		// A join filter on these sessions is a nested loop testing every
		// pair of rows: a cost growing with the square of the batch.
		for _, banned := range []string{"Seq Scan", "Hash Join", "Merge Join", "Bitmap", "Join Filter"} {
			assert.NotContainsf(t, plan, banned, "generic plan of %s:\n%s", query, plan)
		}
		// deliveries is partitioned (migration 00018): the statement's
		// target is each partition the update names (Update on
		// deliveries_x alias), and each is probed once, by its key.
		targets := map[string]string{} // alias → partition
		for _, m := range updateTarget.FindAllStringSubmatch(plan, -1) {
			targets[m[2]] = m[1]
		}
		scanned := map[string]int{}
		for _, line := range strings.Split(plan, "\n") {
			if m := partitionScan.FindStringSubmatch(line); m != nil && targets[m[2]] == m[1] {
				scanned[m[1]]++
				assert.Containsf(t, line, "Index Scan using "+m[1]+"_pkey on "+m[1], "generic plan of %s:\n%s", query, plan)
			}
		}
		assert.Lenf(t, scanned, len(targets), "generic plan of %s does not read each partition it updates:\n%s", query, plan)
		for partition, n := range scanned {
			assert.Equalf(t, 1, n, "generic plan of %s reads %s more than once:\n%s", query, partition, plan)
		}
	}
}

// TestDueScanSkipsQueuedDeliveries checks that the scheduler's scan costs
// what it finds, not the backlog: with thousands of deliveries waiting in
// the queue (marked enqueued within the requeue window) and none lost, it
// reads a handful of index pages. Before migration 00009 it fetched every
// one of them from the heap to read its mark.
func TestDueScanSkipsQueuedDeliveries(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	// One connection, so that the statistics read below are those the
	// scan's own session flushed.
	cfg := pgtest.NewPool(t).Config()
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	now := time.Now().UTC()
	for _, stmt := range []string{
		`INSERT INTO subscriptions (id, url, event_types, secret, rate_limit, max_in_flight, timeout, retry_policy, created_at, updated_at)
		 VALUES ('sub_1', 'https://example.com', '{*}', '', 10, 10, '10s', '{}', $1, $1)`,
		`INSERT INTO events (id, type, data, created_at, fanned_out_at)
		 SELECT 'evt_' || lpad(g::text, 6, '0'), 'order.paid', '{}', $1, $1 FROM generate_series(1, 5000) g`,
		`INSERT INTO deliveries (id, event_id, subscription_id, status, next_attempt_at, enqueued_at, created_at, updated_at)
		 SELECT 'dlv_' || lpad(g::text, 6, '0'), 'evt_' || lpad(g::text, 6, '0'), 'sub_1', 'pending',
		        $1::timestamptz - interval '1 second', $1::timestamptz - interval '1 second', $1, $1
		 FROM generate_series(1, 5000) g`,
	} {
		_, err := pool.Exec(ctx, stmt, now)
		require.NoError(t, err)
	}
	_, err = pool.Exec(ctx, `ANALYZE deliveries`)
	require.NoError(t, err)

	buffersRead := func() int {
		t.Helper()
		_, err := pool.Exec(ctx, `SELECT pg_stat_force_next_flush()`)
		require.NoError(t, err)
		var n int
		require.NoError(t, pool.QueryRow(ctx, `
			SELECT coalesce(sum(idx_blks_hit + idx_blks_read + heap_blks_hit + heap_blks_read), 0)::int
			FROM pg_statio_user_tables WHERE relname = 'deliveries'`).Scan(&n))
		return n
	}
	store := postgres.New(pool)
	before := buffersRead()
	ids, err := store.DueDeliveries(ctx, now, 30*time.Second, 100)
	require.NoError(t, err)
	require.Empty(t, ids, "every delivery is in the queue and within its requeue window")
	read := buffersRead() - before
	assert.Less(t, read, 100, "the scan read %d buffers of deliveries for no row", read)

	// The same deliveries past their requeue window are found, up to the
	// limit.
	ids, err = store.DueDeliveries(ctx, now.Add(time.Minute), 30*time.Second, 3)
	require.NoError(t, err)
	assert.Len(t, ids, 3)
}

// TestEventPagesReadOnlyTheirPage checks that a page of an event's
// deliveries or attempts costs the page, not the event: with 10,000
// deliveries of one event, each with two attempts, a page of 50 from the
// middle reads a few dozen buffers. Ordered by delivery id, a page had
// either to fetch every delivery of the event and sort them, or to walk
// the primary key through other events' deliveries.
func TestEventPagesReadOnlyTheirPage(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	cfg := pgtest.NewPool(t).Config()
	cfg.MaxConns = 1 // the statistics read below are those its session flushed
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	now := time.Now().UTC()
	for _, stmt := range []string{
		`INSERT INTO events (id, type, data, created_at, fanned_out_at) VALUES ('evt_1', 'order.paid', '{}', $1, $1)`,
		// Delivery ids sort opposite to subscription ids.
		`INSERT INTO deliveries (id, event_id, subscription_id, status, next_attempt_at, created_at, updated_at)
		 SELECT 'dlv_' || lpad((100000 - g)::text, 6, '0'), 'evt_1', 'sub_' || lpad(g::text, 6, '0'), 'retrying', $1, $1, $1
		 FROM generate_series(1, 10000) g`,
		`INSERT INTO attempts (delivery_id, subscription_id, attempt, status_code, duration, created_at)
		 SELECT 'dlv_' || lpad((100000 - g)::text, 6, '0'), 'sub_' || lpad(g::text, 6, '0'), n, 500, '1 ms', $1
		 FROM generate_series(1, 10000) g, generate_series(1, 2) n`,
		// Another event, fanned out at the same moments to the same
		// subscriptions: its delivery ids interleave with the first's.
		`INSERT INTO events (id, type, data, created_at, fanned_out_at) VALUES ('evt_2', 'order.paid', '{}', $1, $1)`,
		`INSERT INTO deliveries (id, event_id, subscription_id, status, next_attempt_at, created_at, updated_at)
		 SELECT 'dlv_' || lpad((100000 - g)::text, 6, '0') || 'b', 'evt_2', 'sub_' || lpad(g::text, 6, '0'), 'retrying', $1, $1, $1
		 FROM generate_series(1, 10000) g`,
	} {
		_, err := pool.Exec(ctx, stmt, now)
		require.NoError(t, err)
	}
	_, err = pool.Exec(ctx, `ANALYZE deliveries, attempts`)
	require.NoError(t, err)

	buffersRead := func() int {
		t.Helper()
		_, err := pool.Exec(ctx, `SELECT pg_stat_force_next_flush()`)
		require.NoError(t, err)
		var n int
		require.NoError(t, pool.QueryRow(ctx, `
			SELECT coalesce(sum(idx_blks_hit + idx_blks_read + heap_blks_hit + heap_blks_read), 0)::int
			FROM pg_statio_user_tables WHERE relname IN ('deliveries', 'attempts')`).Scan(&n))
		return n
	}
	store := postgres.New(pool)

	before := buffersRead()
	ds, err := store.EventDeliveries(ctx, "evt_1", ports.Page{After: "sub_005000", Limit: 50})
	require.NoError(t, err)
	read := buffersRead() - before
	require.Len(t, ds, 50)
	assert.Equal(t, "sub_005001", ds[0].SubscriptionID)
	assert.Less(t, read, 50, "a page of 50 deliveries read %d buffers", read)

	before = buffersRead()
	as, err := store.EventAttempts(ctx, "evt_1", ports.AttemptPage{AfterSubscription: "sub_005000", AfterAttempt: 1, Limit: 50})
	require.NoError(t, err)
	read = buffersRead() - before
	require.Len(t, as, 50)
	assert.Equal(t, "sub_005000", as[0].SubscriptionID)
	assert.Equal(t, 2, as[0].Number)
	assert.Less(t, read, 300, "a page of 50 attempts read %d buffers", read)
}
