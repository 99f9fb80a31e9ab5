package postgres_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatch-webhooks/dispatch/adapters/postgres"
	"github.com/dispatch-webhooks/dispatch/adapters/postgres/pgtest"
	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// historyFixture is a store on a database with only the legacy partitions
// (no windows yet) and one subscription.
type historyFixture struct {
	pool  *pgxpool.Pool
	store *postgres.Store
	sub   domain.Subscription
	now   time.Time
}

func newHistoryFixture(t *testing.T) historyFixture {
	t.Helper()
	pool, err := postgres.Connect(t.Context(), pgtest.NewDatabase(t))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	store := postgres.New(pool)
	now := time.Now().UTC().Truncate(time.Millisecond)
	sub := historySubscription(t, store, now)
	return historyFixture{pool: pool, store: store, sub: sub, now: now}
}

// historySubscription stores a subscription to every event type.
func historySubscription(t *testing.T, store *postgres.Store, now time.Time) domain.Subscription {
	t.Helper()
	sub := domain.Subscription{
		ID: domain.MustNewID(domain.SubscriptionIDPrefix, now), URL: "https://hooks.example.com/history",
		EventTypes: []string{"*"}, Secret: domain.MustGenerateSecret(), Active: true,
		RateLimit: domain.DefaultRateLimit, MaxInFlight: domain.DefaultMaxInFlight,
		Timeout: domain.DefaultTimeout, RetryPolicy: domain.DefaultRetryPolicy(),
		Headers: map[string]string{}, CreatedAt: now, UpdatedAt: now,
	}
	require.NoError(t, store.CreateSubscription(t.Context(), sub))
	return sub
}

// delivery stores an event made at at, with its delivery, and one
// attempt: delivered when status is terminal, else a failed one that
// leaves it retrying.
func (f historyFixture) delivery(t *testing.T, at time.Time, status domain.DeliveryStatus) (domain.Event, domain.Delivery) {
	t.Helper()
	id, err := domain.NewID(domain.EventIDPrefix, at, bytes.NewReader(bytes.Repeat([]byte{7}, 10)))
	require.NoError(t, err)
	e := domain.Event{ID: id, Type: "order.created", Data: []byte(`{}`), Status: domain.EventPending, CreatedAt: at}
	_, _, err = f.store.CreateEvent(t.Context(), e, at.Add(-time.Hour))
	require.NoError(t, err)
	d := domain.NewDelivery(e, f.sub, at)
	_, err = f.store.CreateDeliveries(t.Context(), []ports.FanOut{{EventID: e.ID, Deliveries: []domain.Delivery{d}}})
	require.NoError(t, err)
	d.Status, d.Attempts, d.UpdatedAt = status, 1, at
	d.NextAttemptAt = at.Add(time.Hour)
	_, err = f.store.RecordAttempt(t.Context(), d, domain.Attempt{
		DeliveryID: d.ID, SubscriptionID: f.sub.ID, Number: 1, StatusCode: 500, CreatedAt: at})
	require.NoError(t, err)
	return e, d
}

func (f historyFixture) partitions(t *testing.T) map[string]int {
	t.Helper()
	got, err := f.store.Partitions(t.Context())
	require.NoError(t, err)
	return got
}

// TestMaintainHistoryDropsExpiredWindowsAndWaitsForLiveOnes: windows are
// made ahead of now; past the retention, a window of terminal history is
// dropped with its events, deliveries and attempts (they read as not
// found), while one holding a delivery still retrying waits, whole, until
// the delivery is terminal.
func TestMaintainHistoryDropsExpiredWindowsAndWaitsForLiveOnes(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	f := newHistoryFixture(t)
	retention := time.Minute // 15 s windows

	done, err := f.store.MaintainHistory(ctx, f.now, retention)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, done.Created, 3, "windows from a window ago to two ahead")
	// The legacy window ended when the template database was migrated:
	// dropped already if that was over a minute ago.
	want := 1 + done.Created - done.Dropped
	assert.Equal(t, map[string]int{"events": want, "deliveries": want, "attempts": want}, f.partitions(t))
	again, err := f.store.MaintainHistory(ctx, f.now, retention)
	require.NoError(t, err)
	again.Took = 0
	assert.Equal(t, ports.Maintenance{}, again, "nothing to do a second time")

	// Two events in two windows: one delivered, one still retrying.
	gone, goneDelivery := f.delivery(t, f.now, domain.DeliveryDelivered)
	kept, keptDelivery := f.delivery(t, f.now.Add(retention/4), domain.DeliveryRetrying)

	later := f.now.Add(10 * time.Minute)
	done, err = f.store.MaintainHistory(ctx, later, retention)
	require.NoError(t, err)
	assert.Equal(t, 1, done.Waiting, "the retrying delivery's window waits")
	assert.Equal(t, want-1, done.Dropped, "every other window, the legacy one too")
	_, err = f.store.GetEvent(ctx, gone.ID)
	assert.ErrorIs(t, err, domain.ErrNotFound)
	_, err = f.store.GetDelivery(ctx, goneDelivery.ID)
	assert.ErrorIs(t, err, domain.ErrNotFound)
	_, err = f.store.GetEvent(ctx, kept.ID)
	require.NoError(t, err, "an event with a live delivery stays")
	attempts, err := f.store.DeliveryAttempts(ctx, keptDelivery.ID)
	require.NoError(t, err)
	assert.Len(t, attempts, 1, "and its attempts")

	// Once terminal, its window goes too.
	keptDelivery.Status, keptDelivery.Attempts = domain.DeliveryDead, 2
	_, err = f.store.RecordAttempt(ctx, keptDelivery, domain.Attempt{
		DeliveryID: keptDelivery.ID, SubscriptionID: f.sub.ID, Number: 2, StatusCode: 500, CreatedAt: later})
	require.NoError(t, err)
	done, err = f.store.MaintainHistory(ctx, later, retention)
	require.NoError(t, err)
	assert.Equal(t, 1, done.Dropped)
	assert.Zero(t, done.Waiting)
	_, err = f.store.GetEvent(ctx, kept.ID)
	assert.ErrorIs(t, err, domain.ErrNotFound)
	_, err = f.store.GetDelivery(ctx, keptDelivery.ID)
	assert.ErrorIs(t, err, domain.ErrNotFound)
	var leftover int
	require.NoError(t, f.pool.QueryRow(ctx, `SELECT count(*) FROM attempts`).Scan(&leftover))
	assert.Zero(t, leftover)

	_, err = f.store.MaintainHistory(ctx, later, 59*time.Second)
	assert.ErrorContains(t, err, "shorter than the minimum 1m0s")
}

// TestOnlyOneMaintenanceAtATime: while another session holds the
// maintenance lock, MaintainHistory skips and changes nothing; once it is
// released, the next call does the work.
func TestOnlyOneMaintenanceAtATime(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	f := newHistoryFixture(t)
	// In the legacy window, which ends when the test database's template
	// was migrated: any time before that, however long ago.
	f.delivery(t, time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC), domain.DeliveryDelivered)

	other, err := f.pool.Acquire(ctx)
	require.NoError(t, err)
	defer other.Release()
	_, err = other.Exec(ctx, "SELECT pg_advisory_lock($1)", postgres.MaintenanceLockKey)
	require.NoError(t, err)
	done, err := f.store.MaintainHistory(ctx, f.now.Add(2*time.Hour), time.Minute)
	require.NoError(t, err)
	assert.Equal(t, ports.Maintenance{Skipped: true}, done)
	assert.Equal(t, map[string]int{"events": 1, "deliveries": 1, "attempts": 1}, f.partitions(t), "nothing made or dropped")

	_, err = other.Exec(ctx, "SELECT pg_advisory_unlock($1)", postgres.MaintenanceLockKey)
	require.NoError(t, err)
	done, err = f.store.MaintainHistory(ctx, f.now.Add(2*time.Hour), time.Minute)
	require.NoError(t, err)
	assert.False(t, done.Skipped)
	assert.Equal(t, 1, done.Dropped, "the legacy window")
	assert.Positive(t, done.Created)
}

// TestMaintenanceNeverQueuesHotStatements: maintenance takes SHARE UPDATE
// EXCLUSIVE on the parents, which conflicts with no row read or write, and
// gives up after its lock timeout rather than wait behind a transaction
// that uses a partition it detaches (which would queue the hot statements
// behind it); a detach it left half done is finished by the next call.
func TestMaintenanceNeverQueuesHotStatements(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	f := newHistoryFixture(t)
	_, err := f.store.MaintainHistory(ctx, f.now, time.Minute)
	require.NoError(t, err)
	_, live := f.delivery(t, f.now, domain.DeliveryRetrying)
	var partition string
	require.NoError(t, f.pool.QueryRow(ctx, `SELECT tableoid::regclass::text FROM deliveries WHERE id = $1`, live.ID).Scan(&partition))

	// A session holding what ATTACH and DETACH take on the parents: claims
	// and records go on.
	tx, err := f.pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "LOCK TABLE events, deliveries, attempts IN SHARE UPDATE EXCLUSIVE MODE")
	require.NoError(t, err)
	claimed, err := f.store.ClaimDelivery(ctx, live.ID, f.now.Add(2*time.Hour), time.Second)
	require.NoError(t, err)
	live = claimed.Delivery
	live.Status, live.Attempts = domain.DeliveryDelivered, 2
	_, err = f.store.RecordAttempt(ctx, live, domain.Attempt{
		DeliveryID: live.ID, SubscriptionID: f.sub.ID, Number: 2, StatusCode: 200, CreatedAt: f.now})
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))

	// A long transaction that read the delivery's partition: its detach
	// gives up after the lock timeout, without an error, and leaves it
	// pending.
	reader, err := f.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = reader.Rollback(ctx) }()
	_, err = reader.Exec(ctx, "SELECT count(*) FROM "+partition)
	require.NoError(t, err)
	later := f.now.Add(10 * time.Minute)
	gaveUp, err := f.store.MaintainHistory(ctx, later, time.Minute)
	require.NoError(t, err, "a lock timeout waits for the next call")
	assert.True(t, gaveUp.LockTimedOut, "the call says it gave up")
	var pending bool
	require.NoError(t, f.pool.QueryRow(ctx,
		`SELECT inhdetachpending FROM pg_inherits WHERE inhrelid = $1::regclass`, partition).Scan(&pending))
	assert.True(t, pending, "the interrupted detach is pending")

	require.NoError(t, reader.Rollback(ctx))
	done, err := f.store.MaintainHistory(ctx, later, time.Minute)
	require.NoError(t, err)
	assert.Positive(t, done.Dropped)
	assert.False(t, done.LockTimedOut)
	var tables int
	require.NoError(t, f.pool.QueryRow(ctx,
		`SELECT count(*) FROM pg_class WHERE relname = $1`, partition).Scan(&tables))
	assert.Zero(t, tables, "the window is gone")
	_, err = f.store.GetDelivery(ctx, live.ID)
	assert.ErrorIs(t, err, domain.ErrNotFound)
}

// TestMaintenanceFinishesWhatACrashLeft: a partition made but not
// attached (a crash between the two) is attached by the next call, and
// one detached but not dropped goes with its window.
func TestMaintenanceFinishesWhatACrashLeft(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	f := newHistoryFixture(t)
	_, err := f.store.MaintainHistory(ctx, f.now, time.Minute)
	require.NoError(t, err)
	before := f.partitions(t)
	_, d := f.delivery(t, f.now, domain.DeliveryDelivered)
	var current, ahead string
	require.NoError(t, f.pool.QueryRow(ctx, `SELECT tableoid::regclass::text FROM deliveries WHERE id = $1`, d.ID).Scan(&current))
	require.NoError(t, f.pool.QueryRow(ctx, `
		SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'events'::regclass ORDER BY c.relname DESC LIMIT 1`).Scan(&ahead))
	_, err = f.pool.Exec(ctx, "ALTER TABLE deliveries DETACH PARTITION "+current)
	require.NoError(t, err)
	_, err = f.pool.Exec(ctx, "ALTER TABLE events DETACH PARTITION "+ahead)
	require.NoError(t, err)

	done, err := f.store.MaintainHistory(ctx, f.now, time.Minute)
	require.NoError(t, err)
	assert.Zero(t, done.Created)
	assert.Equal(t, before, f.partitions(t), "both attached again")
	got, err := f.store.GetDelivery(ctx, d.ID)
	require.NoError(t, err)
	assert.Equal(t, d.ID, got.ID)

	_, err = f.pool.Exec(ctx, "ALTER TABLE deliveries DETACH PARTITION "+current)
	require.NoError(t, err)
	_, err = f.store.MaintainHistory(ctx, f.now.Add(10*time.Minute), time.Minute)
	require.NoError(t, err)
	var left int
	require.NoError(t, f.pool.QueryRow(ctx, `SELECT count(*) FROM pg_class WHERE relname = $1`, current).Scan(&left))
	assert.Zero(t, left, "the detached partition went with its window")
}
