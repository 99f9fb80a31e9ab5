package postgres_test

import (
	"context"
	"fmt"
	"sync"
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
	"github.com/dispatch-webhooks/dispatch/ports"
)

// Tests of the group commit of the worker's claims and outcomes
// (ClaimDelivery, RecordAttempt): many concurrent callers, and batches made
// known by holding a delivery's row locked (SELECT … FOR UPDATE, which the
// batch statement's own row locking waits for) while callers line up
// behind the stuck batch.

// workerCallers is how many goroutines claim or record at once.
const workerCallers = 200

// workerWait bounds every wait; generous for a loaded CI machine.
const workerWait = 10 * time.Second

// workerFixture is a store as deployed (with a BatchPool) with one
// subscription.
type workerFixture struct {
	pool  *pgxpool.Pool
	batch *pgxpool.Pool
	store *postgres.Store
	sub   domain.Subscription
	now   time.Time
}

func newWorkerFixture(t *testing.T) workerFixture {
	t.Helper()
	pool, batch := pgtest.NewPools(t)
	store := postgres.New(pool, postgres.BatchPool(batch))
	now := time.Now().UTC().Truncate(time.Microsecond)
	sub := domain.Subscription{
		ID:          domain.MustNewID(domain.SubscriptionIDPrefix, now),
		URL:         "https://hooks.example.com/worker",
		EventTypes:  []string{"*"},
		Secret:      domain.MustGenerateSecret(),
		Active:      true,
		RateLimit:   domain.DefaultRateLimit,
		MaxInFlight: domain.DefaultMaxInFlight,
		Timeout:     domain.DefaultTimeout,
		RetryPolicy: domain.DefaultRetryPolicy(),
		Headers:     map[string]string{},
		CreatedAt:   now,
		UpdatedAt:   now,
	}
	require.NoError(t, store.CreateSubscription(t.Context(), sub))
	return workerFixture{pool: pool, batch: batch, store: store, sub: sub, now: now}
}

// deliveries stores n due deliveries, one per new event (so their event
// ids increase with their index), each changed by mod first.
func (f workerFixture) deliveries(t *testing.T, n int, mod func(i int, d *domain.Delivery)) []domain.Delivery {
	t.Helper()
	var fanouts []ports.FanOut
	ds := make([]domain.Delivery, n)
	for i := range ds {
		e := domain.Event{
			ID:        domain.MustNewID(domain.EventIDPrefix, f.now),
			Type:      "order.created",
			Source:    "shop",
			Data:      []byte(fmt.Sprintf(`{"n":%d}`, i)),
			Status:    domain.EventPending,
			CreatedAt: f.now,
		}
		_, _, err := f.store.CreateEvent(t.Context(), e, f.now.Add(-time.Hour))
		require.NoError(t, err)
		ds[i] = domain.Delivery{
			ID:             domain.MustNewID(domain.DeliveryIDPrefix, f.now),
			EventID:        e.ID,
			SubscriptionID: f.sub.ID,
			Status:         domain.DeliveryPending,
			NextAttemptAt:  f.now,
			CreatedAt:      f.now,
			UpdatedAt:      f.now,
		}
		if mod != nil {
			mod(i, &ds[i])
		}
		fanouts = append(fanouts, ports.FanOut{EventID: e.ID, Deliveries: []domain.Delivery{ds[i]}})
	}
	_, err := f.store.CreateDeliveries(t.Context(), fanouts)
	require.NoError(t, err)
	return ds
}

// lockDeliveries holds the rows of deliveries ids locked until the returned
// function (also run at cleanup) releases them.
func (f workerFixture) lockDeliveries(t *testing.T, ids ...string) (release func()) {
	t.Helper()
	tx, err := f.pool.Begin(t.Context())
	require.NoError(t, err)
	_, err = tx.Exec(t.Context(), "SELECT 1 FROM deliveries WHERE id = ANY($1) FOR UPDATE", ids)
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

// stuckStatement waits until a backend other than those in not runs the
// sqlc query named query and waits for a lock, and returns its pid.
func (f workerFixture) stuckStatement(t *testing.T, query string, not ...int32) int32 {
	t.Helper()
	deadline := time.Now().Add(workerWait)
	for {
		var pid int32
		err := f.pool.QueryRow(t.Context(), `
			SELECT pid FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'
			  AND query LIKE $1 AND pid <> ALL($2::int[])`, "-- name: "+query+" %", append([]int32{}, not...)).Scan(&pid)
		if err == nil {
			return pid
		}
		require.ErrorIs(t, err, pgx.ErrNoRows)
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s to wait for a row lock", workerWait, query)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// statementEnded waits until backend pid no longer runs a statement. A
// caller that gives up leaves its backend running: pgx closes the
// connection and sends PostgreSQL a cancel request on the side, which
// lands a little later (until then a statement waiting for a lock would
// still go ahead once it gets it).
func statementEnded(t *testing.T, pool *pgxpool.Pool, pid int32) {
	t.Helper()
	deadline := time.Now().Add(workerWait)
	for {
		var running bool
		err := pool.QueryRow(t.Context(),
			`SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND state = 'active')`, pid).Scan(&running)
		require.NoError(t, err)
		if !running {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for backend %d's statement to end", workerWait, pid)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// lineUp starts call n times, one at a time, each once the previous one
// waits for a batch (waiting counts them), and returns their outcomes.
func lineUp[T any](t *testing.T, n int, waiting func() int, call func(i int) T) []<-chan T {
	t.Helper()
	outs := make([]<-chan T, n)
	for i := range n {
		before := waiting()
		out := make(chan T, 1)
		go func() { out <- call(i) }()
		outs[i] = out
		deadline := time.Now().Add(workerWait)
		for waiting() != before+1 {
			if time.Now().After(deadline) {
				t.Fatalf("waited %s for call %d to queue behind the stuck batch", workerWait, i)
			}
			time.Sleep(time.Millisecond)
		}
	}
	return outs
}

func await[T any](t *testing.T, out <-chan T, what string) T {
	t.Helper()
	select {
	case r := <-out:
		return r
	case <-time.After(workerWait):
		t.Fatalf("waited %s for %s", workerWait, what)
		var zero T
		return zero
	}
}

type claimOutcome struct {
	claimed ports.Claimed
	err     error
}

type recordOutcome struct {
	next []string
	err  error
}

func TestGroupCommitClaimsGiveEachCallerItsOwnDelivery(t *testing.T) {
	t.Parallel()
	f := newWorkerFixture(t)
	ds := f.deliveries(t, workerCallers, nil)
	// Each delivery is claimed by two callers at once: one of them gets
	// it, whether or not the two share a batch.
	var wg sync.WaitGroup
	outs := make([]claimOutcome, 2*len(ds))
	for i := range outs {
		wg.Go(func() {
			c, err := f.store.ClaimDelivery(t.Context(), ds[i/2].ID, f.now, time.Minute)
			outs[i] = claimOutcome{c, err}
		})
	}
	wg.Wait()
	for i, d := range ds {
		a, b := outs[2*i], outs[2*i+1]
		if a.err != nil {
			a, b = b, a
		}
		require.NoError(t, a.err, "delivery %d: one claim succeeds", i)
		require.ErrorIs(t, b.err, domain.ErrConflict, "delivery %d: the other finds it leased", i)
		assert.Equal(t, d.ID, a.claimed.Delivery.ID)
		assert.Equal(t, d.EventID, a.claimed.Event.ID, "delivery %d comes with its own event", i)
		assert.JSONEq(t, fmt.Sprintf(`{"n":%d}`, i), string(a.claimed.Event.Data))
		assert.Equal(t, f.sub.ID, a.claimed.Subscription.ID)
		assert.Equal(t, domain.DeliveryDelivering, a.claimed.Delivery.Status)
		assert.True(t, a.claimed.Delivery.NextAttemptAt.Equal(f.now.Add(f.sub.Timeout+time.Minute)), "leased for the timeout plus the margin")
	}
}

func TestGroupCommitClaimBatchKeepsPerCallOutcomes(t *testing.T) {
	t.Parallel()
	f := newWorkerFixture(t)
	ds := f.deliveries(t, 4, nil)
	blocker, free, other, notDue := ds[0], ds[1], ds[2], ds[3]
	// Held: ordered behind an earlier event's delivery of its key.
	ordered := f.deliveries(t, 2, func(_ int, d *domain.Delivery) { d.OrderingKey = "customer-1" })
	missing := domain.MustNewID(domain.DeliveryIDPrefix, f.now)

	release := f.lockDeliveries(t, blocker.ID)
	first := make(chan claimOutcome, 1)
	go func() {
		c, err := f.store.ClaimDelivery(t.Context(), blocker.ID, f.now, time.Minute)
		first <- claimOutcome{c, err}
	}()
	f.stuckStatement(t, "ClaimDeliveries")

	type claim struct {
		id  string
		now time.Time
	}
	batch := []claim{
		{free.ID, f.now},
		{free.ID, f.now.Add(time.Second)}, // the same delivery again, in the same batch
		{missing, f.now},
		{notDue.ID, f.now.Add(-time.Hour)},
		{ordered[1].ID, f.now},
		{ordered[0].ID, f.now},
		{other.ID, f.now.Add(time.Second)},
	}
	outs := lineUp(t, len(batch), func() int { return postgres.ClaimsWaiting(f.store) }, func(i int) claimOutcome {
		c, err := f.store.ClaimDelivery(t.Context(), batch[i].id, batch[i].now, time.Minute)
		return claimOutcome{c, err}
	})
	release()

	r := await(t, first, "the stuck claim")
	require.NoError(t, r.err)
	assert.Equal(t, blocker.ID, r.claimed.Delivery.ID)
	got := make([]claimOutcome, len(outs))
	for i, out := range outs {
		got[i] = await(t, out, fmt.Sprintf("claim %d of the batch", i))
	}
	if assert.NoError(t, got[0].err, "the first claim of a delivery named twice gets it") {
		assert.Equal(t, free.ID, got[0].claimed.Delivery.ID)
	}
	assert.ErrorIs(t, got[1].err, domain.ErrConflict, "the second claim of a delivery in one batch finds it leased")
	assert.ErrorIs(t, got[2].err, domain.ErrNotFound)
	assert.ErrorIs(t, got[3].err, domain.ErrConflict, "not due at its now")
	assert.ErrorIs(t, got[4].err, domain.ErrConflict, "held behind the earlier event of its key")
	assert.ErrorContains(t, got[4].err, "held behind")
	if assert.NoError(t, got[5].err, "first in line") {
		assert.Equal(t, ordered[0].ID, got[5].claimed.Delivery.ID)
	}
	if assert.NoError(t, got[6].err) {
		assert.Equal(t, other.ID, got[6].claimed.Delivery.ID)
		assert.True(t, got[6].claimed.Delivery.UpdatedAt.Equal(f.now.Add(time.Second)), "claimed at its own now")
		assert.True(t, got[6].claimed.Delivery.NextAttemptAt.Equal(f.now.Add(time.Second+f.sub.Timeout+time.Minute)), "leased from its own now")
	}
	stored, err := f.store.GetDelivery(t.Context(), free.ID)
	require.NoError(t, err)
	assert.True(t, stored.UpdatedAt.Equal(f.now), "leased by the first claim, not the second")
}

func TestGroupCommitRecordsGiveEachCallerItsOwnOutcome(t *testing.T) {
	t.Parallel()
	f := newWorkerFixture(t)
	// Half the deliveries are ordered in pairs (one key per pair, the even
	// one first): when the first of a pair is delivered, its caller and
	// only its caller gets the second as next in line.
	ds := f.deliveries(t, workerCallers, func(i int, d *domain.Delivery) {
		if i < workerCallers/2 {
			d.OrderingKey = fmt.Sprintf("key-%d", i/2)
		}
	})
	finished := f.now.Add(time.Second)
	var wg sync.WaitGroup
	outs := make([]recordOutcome, len(ds))
	for i, d := range ds {
		if i < workerCallers/2 && i%2 == 1 {
			continue // the second of a pair waits for the first
		}
		wg.Go(func() {
			c, err := f.store.ClaimDelivery(t.Context(), d.ID, f.now, time.Minute)
			if err != nil {
				outs[i] = recordOutcome{err: err}
				return
			}
			next := c.Delivery
			next.Attempts, next.UpdatedAt = 1, finished
			code := 200 + i
			if i%3 == 0 {
				next.Status, next.NextAttemptAt, next.LastError = domain.DeliveryRetrying, finished.Add(time.Duration(i)*time.Second), fmt.Sprintf("error %d", i)
				code = 500 + i
			} else {
				next.Status = domain.DeliveryDelivered
			}
			next.LastStatusCode = code
			a := domain.Attempt{DeliveryID: d.ID, Number: 1, StatusCode: code, ResponseBody: fmt.Sprintf("body %d", i), Error: next.LastError, Duration: time.Duration(i) * time.Millisecond, CreatedAt: finished}
			n, err := f.store.RecordAttempt(t.Context(), next, a)
			outs[i] = recordOutcome{n, err}
		})
	}
	wg.Wait()
	for i, d := range ds {
		if i < workerCallers/2 && i%2 == 1 {
			continue
		}
		require.NoError(t, outs[i].err, "delivery %d", i)
		switch {
		case i < workerCallers/2 && i%3 != 0:
			assert.Equal(t, []string{ds[i+1].ID}, outs[i].next, "delivery %d, delivered, lets the next of its key go", i)
		default:
			assert.Empty(t, outs[i].next, "delivery %d: unordered or not terminal", i)
		}
		stored, err := f.store.GetDelivery(t.Context(), d.ID)
		require.NoError(t, err)
		attempts, err := f.store.DeliveryAttempts(t.Context(), d.ID)
		require.NoError(t, err)
		require.Len(t, attempts, 1, "delivery %d", i)
		a := attempts[0]
		assert.Equal(t, fmt.Sprintf("body %d", i), a.ResponseBody, "delivery %d stored its own attempt", i)
		assert.Equal(t, time.Duration(i)*time.Millisecond, a.Duration)
		if i%3 == 0 {
			assert.Equal(t, domain.DeliveryRetrying, stored.Status)
			assert.Equal(t, 500+i, stored.LastStatusCode)
			assert.Equal(t, 500+i, a.StatusCode)
			assert.Equal(t, fmt.Sprintf("error %d", i), stored.LastError)
			assert.Equal(t, fmt.Sprintf("error %d", i), a.Error)
			assert.True(t, stored.NextAttemptAt.Equal(finished.Add(time.Duration(i)*time.Second)), "delivery %d", i)
		} else {
			assert.Equal(t, domain.DeliveryDelivered, stored.Status)
			assert.Equal(t, 200+i, stored.LastStatusCode)
			assert.Equal(t, 200+i, a.StatusCode)
			assert.Empty(t, stored.LastError)
		}
	}
}

func TestGroupCommitRecordBatchFailsOnlyTheConflictingCaller(t *testing.T) {
	t.Parallel()
	f := newWorkerFixture(t)
	ds := f.deliveries(t, 4, nil)
	blocker, fenced, innocentA, innocentB := ds[0], ds[1], ds[2], ds[3]
	finished := f.now.Add(time.Second)
	outcome := func(d domain.Delivery, number, code int) (domain.Delivery, domain.Attempt) {
		d.Status, d.Attempts, d.LastStatusCode, d.UpdatedAt = domain.DeliveryRetrying, number, code, finished
		d.NextAttemptAt = finished.Add(time.Minute)
		return d, domain.Attempt{DeliveryID: d.ID, Number: number, StatusCode: code, ResponseBody: fmt.Sprint(code), CreatedAt: finished}
	}
	// Attempt 1 of fenced is recorded already, by the worker that holds
	// its lease now.
	d, a := outcome(fenced, 1, 500)
	_, err := f.store.RecordAttempt(t.Context(), d, a)
	require.NoError(t, err)

	release := f.lockDeliveries(t, blocker.ID)
	first := make(chan recordOutcome, 1)
	go func() {
		d, a := outcome(blocker, 1, 501)
		n, err := f.store.RecordAttempt(t.Context(), d, a)
		first <- recordOutcome{n, err}
	}()
	f.stuckStatement(t, "RecordAttempts")

	missing := innocentB
	missing.ID = domain.MustNewID(domain.DeliveryIDPrefix, f.now)
	type call struct {
		d domain.Delivery
		a domain.Attempt
	}
	var batch []call
	for _, c := range []struct {
		d            domain.Delivery
		number, code int
	}{
		{innocentA, 1, 502},
		{fenced, 1, 503}, // a worker whose lease expired
		{missing, 1, 504},
		{innocentA, 2, 505}, // the same delivery again, in the same batch
		{innocentB, 1, 506},
	} {
		d, a := outcome(c.d, c.number, c.code)
		batch = append(batch, call{d, a})
	}
	outs := lineUp(t, len(batch), func() int { return postgres.AttemptsWaiting(f.store) }, func(i int) recordOutcome {
		n, err := f.store.RecordAttempt(t.Context(), batch[i].d, batch[i].a)
		return recordOutcome{n, err}
	})
	release()

	require.NoError(t, await(t, first, "the stuck record").err)
	got := make([]recordOutcome, len(outs))
	for i, out := range outs {
		got[i] = await(t, out, fmt.Sprintf("record %d of the batch", i))
	}
	assert.NoError(t, got[0].err)
	assert.ErrorIs(t, got[1].err, domain.ErrConflict, "the fenced worker's attempt conflicts")
	assert.ErrorIs(t, got[2].err, domain.ErrNotFound)
	assert.NoError(t, got[3].err, "a second attempt of a delivery in the batch is stored after the first")
	assert.NoError(t, got[4].err)

	wantAttempts := map[string][]int{blocker.ID: {501}, fenced.ID: {500}, innocentA.ID: {502, 505}, innocentB.ID: {506}}
	for id, codes := range wantAttempts {
		attempts, err := f.store.DeliveryAttempts(t.Context(), id)
		require.NoError(t, err)
		var stored []int
		for _, a := range attempts {
			stored = append(stored, a.StatusCode)
		}
		assert.Equal(t, codes, stored, "attempts of %s", id)
		d, err := f.store.GetDelivery(t.Context(), id)
		require.NoError(t, err)
		assert.Equal(t, codes[len(codes)-1], d.LastStatusCode, "delivery %s holds its last outcome", id)
	}
}

// TestGroupCommitClaimCancelReturnsPromptly is not parallel: it checks with
// goleak that no goroutine outlives the calls, which other tests starting
// goroutines meanwhile would confuse.
func TestGroupCommitClaimCancelReturnsPromptly(t *testing.T) {
	f := newWorkerFixture(t)
	ds := f.deliveries(t, 4, nil)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	blocker, dropped, stays, late := ds[0], ds[1], ds[2], ds[3]
	const promptly = time.Second

	release := f.lockDeliveries(t, blocker.ID, stays.ID)
	leaderCtx, cancelLeader := context.WithCancel(t.Context())
	defer cancelLeader()
	claim := func(ctx context.Context, id string) <-chan claimOutcome {
		out := make(chan claimOutcome, 1)
		go func() {
			c, err := f.store.ClaimDelivery(ctx, id, f.now, time.Minute)
			out <- claimOutcome{c, err}
		}()
		return out
	}
	waiting := func() int { return postgres.ClaimsWaiting(f.store) }
	first := claim(leaderCtx, blocker.ID)
	leaderPID := f.stuckStatement(t, "ClaimDeliveries")

	// Cancelled while waiting for a batch: returns at once, never claimed.
	ctx, cancel := context.WithCancel(t.Context())
	out := lineUp(t, 1, waiting, func(int) claimOutcome { return <-claim(ctx, dropped.ID) })[0]
	cancel()
	cancelled := time.Now()
	assert.ErrorIs(t, await(t, out, "the claim cancelled while waiting for a batch").err, context.Canceled)
	assert.Less(t, time.Since(cancelled), promptly, "returns without waiting for the stuck batch")
	assert.Zero(t, waiting(), "the cancelled caller left the queue")

	// Cancelled while its batch is being written: returns at once too, and
	// the batch goes on for the others, so the delivery may be leased all
	// the same (the lease then expires and the delivery is due again).
	lateCtx, cancelLate := context.WithCancel(t.Context())
	defer cancelLate()
	outs := lineUp(t, 1, waiting, func(int) claimOutcome { return <-claim(t.Context(), stays.ID) })
	outs = append(outs, lineUp(t, 1, waiting, func(int) claimOutcome { return <-claim(lateCtx, late.ID) })...)
	// The first leader gives up, alone in its batch: its statement is
	// cancelled and the next batch, stays and late, is stuck in turn (on
	// stays' row).
	cancelLeader()
	assert.ErrorIs(t, await(t, first, "the cancelled leader").err, context.Canceled)
	statementEnded(t, f.pool, leaderPID)
	f.stuckStatement(t, "ClaimDeliveries", leaderPID)
	cancelLate()
	cancelled = time.Now()
	assert.ErrorIs(t, await(t, outs[1], "the claim cancelled while its batch is written").err, context.Canceled)
	assert.Less(t, time.Since(cancelled), promptly, "returns without waiting for its stuck batch")
	release()
	r := await(t, outs[0], "the leader of that batch")
	require.NoError(t, r.err)
	assert.Equal(t, stays.ID, r.claimed.Delivery.ID)

	for _, d := range []domain.Delivery{stays, late} {
		got, err := f.store.GetDelivery(t.Context(), d.ID)
		require.NoError(t, err)
		assert.Equal(t, domain.DeliveryDelivering, got.Status, "delivery %s leased with its batch", d.ID)
	}
	for _, d := range []domain.Delivery{blocker, dropped} {
		got, err := f.store.GetDelivery(t.Context(), d.ID)
		require.NoError(t, err)
		assert.Equal(t, domain.DeliveryPending, got.Status, "delivery %s: its caller gave up before it was claimed", d.ID)
	}
}

func TestGroupCommitClaimBatchAbortedByADeadlockIsWrittenAgain(t *testing.T) {
	t.Parallel()
	f := newWorkerFixture(t)
	ds := f.deliveries(t, 3, nil)
	blocker, a, b := ds[0], ds[1], ds[2]

	release := f.lockDeliveries(t, blocker.ID)
	first := make(chan claimOutcome, 1)
	go func() {
		c, err := f.store.ClaimDelivery(t.Context(), blocker.ID, f.now, time.Minute)
		first <- claimOutcome{c, err}
	}()
	f.stuckStatement(t, "ClaimDeliveries")
	// b is claimed first, so a batch sent in arrival order would lock b
	// before a.
	outs := lineUp(t, 2, func() int { return postgres.ClaimsWaiting(f.store) }, func(i int) claimOutcome {
		id := []string{b.ID, a.ID}[i]
		c, err := f.store.ClaimDelivery(t.Context(), id, f.now, time.Minute)
		return claimOutcome{c, err}
	})

	// Another transaction holds b. The batch locks a, then waits for b;
	// the transaction then waits for a: a deadlock, which PostgreSQL breaks
	// by aborting the batch, the first to wait.
	tx, err := f.pool.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.WithoutCancel(t.Context())) }()
	// The backend that checks for a deadlock first is the one aborted. The
	// batch waits first, so it checks first, unless a loaded machine delays
	// its check past this transaction's: this one checks only after 30 s.
	_, err = tx.Exec(t.Context(), "SET LOCAL deadlock_timeout = '30s'")
	require.NoError(t, err)
	_, err = tx.Exec(t.Context(), "SELECT 1 FROM deliveries WHERE id = $1 FOR UPDATE", b.ID)
	require.NoError(t, err)
	release()
	require.NoError(t, await(t, first, "the stuck claim").err)
	// The batch of a and b, maybe on the same connection as the first.
	f.stuckStatement(t, "ClaimDeliveries")
	_, err = tx.Exec(t.Context(), "SELECT 1 FROM deliveries WHERE id = $1 FOR UPDATE", a.ID)
	require.NoError(t, err, "the batch, not this transaction, is aborted")
	require.NoError(t, tx.Rollback(t.Context()))

	for i, id := range []string{b.ID, a.ID} {
		r := await(t, outs[i], fmt.Sprintf("claim %d of the batch", i))
		if assert.NoError(t, r.err, "the aborted batch is written again") {
			assert.Equal(t, id, r.claimed.Delivery.ID)
		}
	}
}
