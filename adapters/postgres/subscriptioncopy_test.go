package postgres_test

import (
	"context"
	"fmt"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatch-webhooks/dispatch/adapters/postgres"
	"github.com/dispatch-webhooks/dispatch/adapters/postgres/pgtest"
	"github.com/dispatch-webhooks/dispatch/domain"
)

// subscriptionReads is a pgx tracer that counts the rows the statements
// reading subscriptions return.
type subscriptionReads struct{ rows atomic.Int64 }

type readsSubscriptions struct{}

func (r *subscriptionReads) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if strings.Contains(data.SQL, "FROM subscriptions") {
		return context.WithValue(ctx, readsSubscriptions{}, true)
	}
	return ctx
}

func (r *subscriptionReads) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	if ctx.Value(readsSubscriptions{}) != nil && data.Err == nil && data.CommandTag.Select() {
		r.rows.Add(data.CommandTag.RowsAffected())
	}
}

// tracedPool is a pool on a fresh database whose subscription reads are
// counted.
func tracedPool(t *testing.T) (*pgxpool.Pool, *subscriptionReads) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.NewDatabase(t))
	require.NoError(t, err)
	cfg.MaxConns = 8
	reads := &subscriptionReads{}
	cfg.ConnConfig.Tracer = reads
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	pgtest.OpenEnded(t, pool)
	return pool, reads
}

// createSubscriptions creates n active subscriptions to types no test
// event has, a few at a time.
func createSubscriptions(t *testing.T, store *postgres.Store, n int) []domain.Subscription {
	t.Helper()
	subs := make([]domain.Subscription, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				subs[i] = benchSubscription(time.Now())
				subs[i].EventTypes = []string{"elsewhere.happened", "elsewhere.*"}
				errs[i] = store.CreateSubscription(context.Background(), subs[i])
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	return subs
}

// TestAPublishAfterAChangeReadsOnlyWhatChanged checks that the API's copy
// of the subscriptions, for inline fan-out, follows a change by reading the
// changed subscription, not all of them again: with 50,000 subscriptions a
// publish right after a PATCH took 300-480 ms reloading them. The change
// is still seen by the very next publish.
func TestAPublishAfterAChangeReadsOnlyWhatChanged(t *testing.T) {
	t.Parallel()
	const n, few = 2_000, 10
	pool, reads := tracedPool(t)
	store := postgres.New(pool)
	subs := createSubscriptions(t, store, n)
	publish := func() []string {
		t.Helper()
		created, fanned, err := store.CreateEventFannedOut(t.Context(), newGroupEvent(time.Now()), func(e domain.Event, active *domain.SubscriptionIndex) ([]domain.Delivery, bool) {
			var ds []domain.Delivery
			for _, s := range active.Match(e.Type) {
				ds = append(ds, domain.NewDeliveryTo(e, s, e.CreatedAt))
			}
			return ds, true
		})
		require.NoError(t, err)
		require.True(t, fanned)
		return created
	}
	require.Empty(t, publish(), "none matches")
	require.GreaterOrEqual(t, reads.rows.Load(), int64(n), "the first publish loads the copy")

	reads.rows.Store(0)
	_, err := store.UpdateSubscription(t.Context(), subs[n/2].ID, func(s *domain.Subscription) error {
		s.EventTypes = []string{"order.created"}
		return nil
	})
	require.NoError(t, err)
	reads.rows.Store(0) // the update's own read of its row
	assert.Len(t, publish(), 1, "the change is seen by the next publish")
	assert.LessOrEqual(t, reads.rows.Load(), int64(few), "subscription rows read to follow one change")

	reads.rows.Store(0)
	done, err := store.DeleteSubscription(t.Context(), subs[n/2].ID, 500)
	require.NoError(t, err)
	require.True(t, done, "a subscription without deliveries is deleted in one call")
	reads.rows.Store(0)
	assert.Empty(t, publish(), "the deletion is seen by the next publish")
	assert.LessOrEqual(t, reads.rows.Load(), int64(few), "subscription rows read to follow one deletion")
}

// TestFanOutMatchesOnTheCopyReadingOnlyWhatChanged checks that the
// fan-out stage's matching (MatchActive) uses the same copy as inline
// fan-out: loaded once, then following a change by reading the changed
// row, not every subscription for every batch (with 50,000 subscriptions,
// fan-out's median delivery went from 54 ms to 547 ms); and that a process
// keeps one copy, however many of its stages match.
func TestFanOutMatchesOnTheCopyReadingOnlyWhatChanged(t *testing.T) {
	t.Parallel()
	const n, few = 2_000, 10
	pool, reads := tracedPool(t)
	store := postgres.New(pool)
	subs := createSubscriptions(t, store, n)
	match := func() int {
		t.Helper()
		matched := 0
		require.NoError(t, store.MatchActive(t.Context(), func(active *domain.SubscriptionIndex) {
			matched = len(active.Match("order.created"))
		}))
		return matched
	}
	require.Zero(t, match(), "none matches")
	require.GreaterOrEqual(t, reads.rows.Load(), int64(n), "the first match loads the copy")

	reads.rows.Store(0)
	require.Zero(t, match())
	assert.Zero(t, reads.rows.Load(), "subscription rows read with nothing changed")
	_, _, err := store.CreateEventFannedOut(t.Context(), newGroupEvent(time.Now()), func(domain.Event, *domain.SubscriptionIndex) ([]domain.Delivery, bool) {
		return nil, true
	})
	require.NoError(t, err)
	assert.LessOrEqual(t, reads.rows.Load(), int64(few), "subscription rows read by inline fan-out: it shares the copy")

	_, err = store.UpdateSubscription(t.Context(), subs[n/3].ID, func(s *domain.Subscription) error {
		s.EventTypes = []string{"order.*"}
		return nil
	})
	require.NoError(t, err)
	reads.rows.Store(0) // the update's own read of its row
	assert.Equal(t, 1, match(), "the change is seen by the next match")
	assert.LessOrEqual(t, reads.rows.Load(), int64(few), "subscription rows read to follow one change")
}

// TestTheCopyOf100000SubscriptionsFitsAProcess checks that the copy of the
// subscriptions a process keeps (inline fan-out, takes) holds 100,000 of
// them in a small part of a process's 200 MiB, and is loaded without
// holding them all in memory at once in another form too.
func TestTheCopyOf100000SubscriptionsFitsAProcess(t *testing.T) {
	// Not parallel: it measures the heap.
	const n, chunk = 100_000, 10_000
	const kept, peak = 60 << 20, 128 << 20
	store := postgres.New(pgtest.NewPool(t))
	ctx := t.Context()
	now := time.Now()
	for range n / chunk {
		subs := make([]domain.Subscription, chunk)
		for i := range subs {
			subs[i] = benchSubscription(now)
			subs[i].URL = fmt.Sprintf("https://hooks%d.example.com/webhooks/dispatch", i)
			subs[i].EventTypes = []string{fmt.Sprintf("tenant%d.order.created", i), fmt.Sprintf("tenant%d.invoice.paid", i), fmt.Sprintf("family%d.*", i%10)}
			subs[i].Description = "the billing service's endpoint"
		}
		require.NoError(t, postgres.CopySubscriptions(ctx, store, subs))
	}

	before := heapInUse()
	highest := watchHeap(t)
	require.NoError(t, store.WarmIngest(ctx)) // loads the copy
	top := highest()
	grown := int64(heapInUse()) - int64(before)
	t.Logf("copy of %d subscriptions: %.1f MiB kept, heap at most %.1f MiB while loading", n, mib(grown), mib(int64(top)))
	assert.Less(t, grown, int64(kept), "heap the copy of %d subscriptions keeps, want under %d MiB", n, kept>>20)
	assert.Less(t, top, uint64(peak), "heap while loading the copy, want under %d MiB", peak>>20)
	runtime.KeepAlive(store)
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// watchHeap samples the bytes of heap objects (live or not yet collected)
// until the returned function is called, which returns the most seen.
func watchHeap(t *testing.T) func() uint64 {
	t.Helper()
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	var highest atomic.Uint64
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			metrics.Read(sample)
			if v := sample[0].Value.Uint64(); v > highest.Load() {
				highest.Store(v)
			}
			select {
			case <-done:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	var once sync.Once
	stop := func() uint64 {
		once.Do(func() { close(done); <-stopped })
		return highest.Load()
	}
	t.Cleanup(func() { stop() })
	return stop
}
