package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/dispatch-webhooks/dispatch/adapters/postgres"
	"github.com/dispatch-webhooks/dispatch/adapters/postgres/pgtest"
	"github.com/dispatch-webhooks/dispatch/domain"
)

// Tests of CreateEvent's group commit. Each holds the events table locked
// (LOCK TABLE … IN SHARE MODE, which INSERT waits for) so that a batch is
// stuck in PostgreSQL while callers line up behind it: which calls share a
// batch is then known, not left to the scheduler.

// waitFor bounds every wait; generous for a loaded CI machine.
const waitFor = 10 * time.Second

// promptly is how soon a cancelled caller must return: far less than the
// batch it leaves behind, which stays stuck until the test releases it.
const promptly = time.Second

var keptSince = time.Now().Add(-time.Hour)

func newGroupEvent(now time.Time) domain.Event {
	return domain.Event{
		ID:        domain.MustNewID(domain.EventIDPrefix, now),
		Type:      "order.created",
		Source:    "shop",
		Data:      []byte(`{"order_id":"ord_1"}`),
		Status:    domain.EventPending,
		CreatedAt: now.UTC().Truncate(time.Microsecond),
	}
}

// lockEvents holds a lock on the events table that every INSERT waits for,
// until the returned function (also run at cleanup) releases it.
func lockEvents(t *testing.T, pool *pgxpool.Pool) (release func()) {
	t.Helper()
	tx, err := pool.Begin(t.Context())
	require.NoError(t, err)
	_, err = tx.Exec(t.Context(), "LOCK TABLE events IN SHARE MODE")
	require.NoError(t, err)
	released := false
	release = func() {
		if !released {
			released = true
			require.NoError(t, tx.Rollback(context.WithoutCancel(t.Context())))
		}
	}
	t.Cleanup(release)
	return release
}

// lockedStore returns a store with one event writer whose events table is
// locked (lockEvents) until release.
func lockedStore(t *testing.T) (pool *pgxpool.Pool, store *postgres.Store, release func()) {
	t.Helper()
	pool = pgtest.NewPool(t)
	store = postgres.OneEventWriter(postgres.New(pool))
	return pool, store, lockEvents(t, pool)
}

// blockedInsert waits until a backend other than those in not runs the
// sqlc query named query and waits for a lock, and returns its pid.
func blockedInsert(t *testing.T, pool *pgxpool.Pool, query string, not ...int32) int32 {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		var pid int32
		err := pool.QueryRow(t.Context(), `
			SELECT pid FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'
			  AND query LIKE $1 AND pid <> ALL($2::int[])`, "-- name: "+query+" %", append([]int32{}, not...)).Scan(&pid)
		if err == nil {
			return pid
		}
		require.ErrorIs(t, err, pgx.ErrNoRows)
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s to wait for the events table lock", waitFor, query)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// result is what one CreateEvent returned.
type result struct {
	event domain.Event
	err   error
}

// createAsync calls CreateEvent on a goroutine of its own.
func createAsync(ctx context.Context, store *postgres.Store, e domain.Event) <-chan result {
	out := make(chan result, 1)
	go func() {
		stored, _, err := store.CreateEvent(ctx, e, keptSince)
		out <- result{stored, err}
	}()
	return out
}

// queueBehind starts CreateEvent for each event, one at a time so that they
// wait in this order, while a batch is stuck.
func queueBehind(t *testing.T, ctx context.Context, store *postgres.Store, events ...domain.Event) []<-chan result {
	t.Helper()
	outs := make([]<-chan result, len(events))
	for i, e := range events {
		before := postgres.EventsWaiting(store)
		outs[i] = createAsync(ctx, store, e)
		deadline := time.Now().Add(waitFor)
		for postgres.EventsWaiting(store) != before+1 {
			if time.Now().After(deadline) {
				t.Fatalf("waited %s for event %d to queue behind the stuck batch", waitFor, i)
			}
			time.Sleep(time.Millisecond)
		}
	}
	return outs
}

func receive(t *testing.T, out <-chan result, what string) result {
	t.Helper()
	select {
	case r := <-out:
		return r
	case <-time.After(waitFor):
		t.Fatalf("waited %s for %s", waitFor, what)
		return result{}
	}
}

func TestGroupCommitRetriesARejectedBatchRowByRow(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	store := postgres.OneEventWriter(postgres.New(pool))
	now := time.Now()
	existing := newGroupEvent(now)
	_, _, err := store.CreateEvent(t.Context(), existing, keptSince)
	require.NoError(t, err)

	release := lockEvents(t, pool)
	first := createAsync(t.Context(), store, newGroupEvent(now))
	blockedInsert(t, pool, "InsertEventsFannedOut")

	// One batch: three innocent events, one whose id is already stored and
	// one that repeats an id earlier in the same batch.
	innocentA, innocentB, innocentC := newGroupEvent(now), newGroupEvent(now), newGroupEvent(now)
	takenID := newGroupEvent(now)
	takenID.ID, takenID.Type = existing.ID, "order.cancelled"
	repeated := newGroupEvent(now)
	repeated.ID, repeated.Type = innocentB.ID, "order.refunded"
	batch := []domain.Event{innocentA, takenID, innocentB, repeated, innocentC}
	outs := queueBehind(t, t.Context(), store, batch...)
	release()

	require.NoError(t, receive(t, first, "the first event").err)
	for i, e := range batch {
		r := receive(t, outs[i], fmt.Sprintf("event %d of the batch", i))
		switch i {
		case 1, 3:
			assert.ErrorIs(t, r.err, domain.ErrConflict, "event %d has a taken id", i)
		default:
			if assert.NoError(t, r.err, "event %d is innocent", i) {
				assert.Equal(t, e, r.event)
			}
		}
	}
	for _, e := range []domain.Event{existing, innocentA, innocentB, innocentC} {
		got, err := store.GetEvent(t.Context(), e.ID)
		require.NoError(t, err)
		assert.Equal(t, e, got, "stored as given; the conflicting events changed nothing")
	}
}

// TestGroupCommitKeepsEachEventsData: a batch's payloads travel end to
// end in one parameter and are cut apart in the statement; each event must
// get back exactly its own, whatever their lengths and bytes.
func TestGroupCommitKeepsEachEventsData(t *testing.T) {
	t.Parallel()
	pool, store, release := lockedStore(t)
	now := time.Now()
	first := createAsync(t.Context(), store, newGroupEvent(now))
	blockedInsert(t, pool, "InsertEventsFannedOut")

	datas := []string{
		`{}`,
		`{"name":"Zoë ☃ 🚚","note":"a\u0000b"}`,
		`{"pad":"` + strings.Repeat("x", 100<<10) + `"}`,
		`{"n":1}`,
		`{"list":[1,2,3],"nested":{"k":"v"}}`,
	}
	batch := make([]domain.Event, len(datas))
	for i, data := range datas {
		batch[i] = newGroupEvent(now)
		batch[i].Data = []byte(data)
	}
	outs := queueBehind(t, t.Context(), store, batch...)
	release()

	require.NoError(t, receive(t, first, "the first event").err)
	for i, e := range batch {
		require.NoError(t, receive(t, outs[i], fmt.Sprintf("event %d of the batch", i)).err)
		got, err := store.GetEvent(t.Context(), e.ID)
		require.NoError(t, err)
		assert.Equal(t, string(e.Data), string(got.Data), "event %d's data, stored in one batch with the others", i)
	}
}

func TestGroupCommitFailureReachesEveryCallerAndStoresNothing(t *testing.T) {
	t.Parallel()
	pool, store, release := lockedStore(t)
	now := time.Now()
	leaderCtx, cancelLeader := context.WithCancel(t.Context())
	defer cancelLeader()
	first := createAsync(leaderCtx, store, newGroupEvent(now))
	leaderPID := blockedInsert(t, pool, "InsertEventsFannedOut")
	batch := []domain.Event{newGroupEvent(now), newGroupEvent(now), newGroupEvent(now), newGroupEvent(now)}
	outs := queueBehind(t, t.Context(), store, batch...)

	// The first leader gives up; nobody else waits for its batch, so its
	// statement is cancelled and the next batch is written: the four.
	cancelLeader()
	assert.ErrorIs(t, receive(t, first, "the cancelled leader").err, context.Canceled)
	pid := blockedInsert(t, pool, "InsertEventsFannedOut", leaderPID)
	// The connection dies under the multi-row INSERT.
	_, err := pool.Exec(t.Context(), "SELECT pg_terminate_backend($1)", pid)
	require.NoError(t, err)

	var errs []error
	for i := range batch {
		r := receive(t, outs[i], fmt.Sprintf("event %d of the failed batch", i))
		require.Error(t, r.err, "event %d", i)
		assert.NotErrorIs(t, r.err, domain.ErrConflict, "a lost connection says nothing about a row")
		errs = append(errs, errors.Unwrap(r.err))
	}
	for _, err := range errs[1:] {
		assert.Equal(t, errs[0].Error(), err.Error(), "every caller gets the batch's error")
	}
	release()
	for _, e := range batch {
		_, err := store.GetEvent(t.Context(), e.ID)
		assert.ErrorIs(t, err, domain.ErrNotFound, "nothing of a failed batch is stored")
	}
	_, created, err := store.CreateEvent(t.Context(), newGroupEvent(now), keptSince)
	require.NoError(t, err, "the store recovers: the pool replaces the dead connection")
	assert.True(t, created)
}

// TestGroupCommitCancelReturnsPromptly is not parallel: it checks with
// goleak that no goroutine outlives the calls, which other tests starting
// goroutines meanwhile would confuse.
func TestGroupCommitCancelReturnsPromptly(t *testing.T) {
	pool := pgtest.NewPool(t)
	store := postgres.OneEventWriter(postgres.New(pool))
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	now := time.Now()

	release := lockEvents(t, pool)
	leader := newGroupEvent(now)
	leaderCtx, cancelLeader := context.WithCancel(t.Context())
	defer cancelLeader()
	first := createAsync(leaderCtx, store, leader)
	leaderPID := blockedInsert(t, pool, "InsertEventsFannedOut")

	// Cancelled while waiting for a batch: returns at once, never stored.
	dropped := newGroupEvent(now)
	ctx, cancel := context.WithCancel(t.Context())
	out := queueBehind(t, ctx, store, dropped)[0]
	cancel()
	cancelled := time.Now()
	assert.ErrorIs(t, receive(t, out, "the caller cancelled while waiting for a batch").err, context.Canceled)
	assert.Less(t, time.Since(cancelled), promptly, "returns without waiting for the stuck batch")
	assert.Zero(t, postgres.EventsWaiting(store), "the cancelled caller left the queue")

	// Cancelled while its batch is being written: returns at once too, and
	// the batch goes on for the others, so the event may be committed all
	// the same (the outbox sweep then enqueues it).
	stays, late := newGroupEvent(now), newGroupEvent(now)
	lateCtx, cancelLate := context.WithCancel(t.Context())
	defer cancelLate()
	outs := queueBehind(t, t.Context(), store, stays)
	outs = append(outs, queueBehind(t, lateCtx, store, late)...)
	// The first leader gives up, alone in its batch: its statement is
	// cancelled and the next batch, stays and late, is stuck in turn.
	cancelLeader()
	assert.ErrorIs(t, receive(t, first, "the cancelled leader").err, context.Canceled)
	statementEnded(t, pool, leaderPID)
	blockedInsert(t, pool, "InsertEventsFannedOut", leaderPID)
	cancelLate()
	cancelled = time.Now()
	assert.ErrorIs(t, receive(t, outs[1], "the caller cancelled while its batch is written").err, context.Canceled)
	assert.Less(t, time.Since(cancelled), promptly, "returns without waiting for its stuck batch")
	release()
	require.NoError(t, receive(t, outs[0], "the leader of that batch").err)

	for _, e := range []domain.Event{stays, late} {
		_, err := store.GetEvent(t.Context(), e.ID)
		assert.NoError(t, err, "event %s committed with its batch", e.ID)
	}
	for _, e := range []domain.Event{leader, dropped} {
		_, err := store.GetEvent(t.Context(), e.ID)
		assert.ErrorIs(t, err, domain.ErrNotFound, "event %s: its caller gave up before it was written", e.ID)
	}
}

// TestInlineFanOutSeesAnotherAPIsSubscriptionChange runs two stores on one
// database, as two API replicas: each caches the active subscriptions, and
// a change made through one must reach the other's next publish. The
// insert statement checks the change counter itself, so the second store's
// stale copy stores nothing and is loaded again.
func TestInlineFanOutSeesAnotherAPIsSubscriptionChange(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	publisher, other := postgres.New(pool), postgres.New(pool)
	all := func(e domain.Event, active *domain.SubscriptionIndex) ([]domain.Delivery, bool) {
		var ds []domain.Delivery
		for _, s := range active.Match(e.Type) {
			ds = append(ds, domain.NewDeliveryTo(e, s, e.CreatedAt))
		}
		return ds, true
	}
	publish := func() []string {
		t.Helper()
		created, fanned, err := publisher.CreateEventFannedOut(t.Context(), newGroupEvent(time.Now()), all)
		require.NoError(t, err)
		require.True(t, fanned)
		return created
	}
	require.Empty(t, publish(), "no subscriptions yet; the publisher has cached none")

	sub := benchSubscription(time.Now())
	require.NoError(t, other.CreateSubscription(t.Context(), sub))
	assert.Len(t, publish(), 1, "a subscription created through the other store")

	_, err := other.UpdateSubscription(t.Context(), sub.ID, func(s *domain.Subscription) error { s.Active = false; return nil })
	require.NoError(t, err)
	assert.Empty(t, publish(), "a subscription deactivated through the other store")
}
