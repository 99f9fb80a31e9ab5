package postgres_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dispatch-webhooks/dispatch/adapters/postgres"
	"github.com/dispatch-webhooks/dispatch/adapters/postgres/pgtest"
	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// workerGoroutines is how many deliveries a worker attempts at once in
// BenchmarkClaimAndRecord (WORKER_CONCURRENCY).
const workerGoroutines = 64

// BenchmarkClaimAndRecord measures the store's share of one delivery in the
// worker, with 64 goroutines in parallel: a claim, then a successful
// attempt recorded. "alone" gives each call a statement and a commit of its
// own (ClaimDelivery, RecordAttempt as before group commit); "groupcommit"
// is the store's ClaimDelivery and RecordAttempt, whose concurrent calls
// share one ClaimDeliveries or RecordAttempts statement. "sync" commits
// wait for the WAL flush (the test pool); "async" is the worker's pool
// (AsyncCommits). SPEC §6's worker target is ≥ 8,000 deliveries/s on a
// 2-core machine with everything co-located:
//
//	go test -run '^$' -bench BenchmarkClaimAndRecord -count 3 ./adapters/postgres/
func BenchmarkClaimAndRecord(b *testing.B) {
	type step struct {
		claim  func(context.Context, *postgres.Store, string, time.Time, time.Duration) (ports.Claimed, error)
		record func(context.Context, *postgres.Store, domain.Delivery, domain.Attempt) ([]string, error)
	}
	modes := []struct {
		name string
		step step
	}{
		{"alone", step{postgres.ClaimDeliveryAlone, postgres.RecordAttemptAlone}},
		{"groupcommit", step{
			func(ctx context.Context, s *postgres.Store, id string, now time.Time, margin time.Duration) (ports.Claimed, error) {
				return s.ClaimDelivery(ctx, id, now, margin)
			},
			func(ctx context.Context, s *postgres.Store, d domain.Delivery, a domain.Attempt) ([]string, error) {
				return s.RecordAttempt(ctx, d, a)
			},
		}},
	}
	for _, commits := range []string{"sync", "async"} {
		for _, mode := range modes {
			b.Run(commits+"/"+mode.name, func(b *testing.B) {
				var store *postgres.Store
				var sub domain.Subscription
				if commits == "sync" {
					s, subs := setUpBench(b, 1)
					store, sub = s, subs[0]
				} else {
					store, sub = setUpAsyncBench(b)
				}
				now := time.Now()
				ready := readyDeliveries(b, store, sub, b.N, now)
				var taken atomic.Int64
				b.SetParallelism(max(1, workerGoroutines/runtime.GOMAXPROCS(0)))
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					ctx := context.Background()
					for pb.Next() {
						d := ready[taken.Add(1)-1]
						c, err := mode.step.claim(ctx, store, d.ID, now, time.Minute)
						if err != nil {
							b.Error(err)
							return
						}
						done := c.Delivery
						done.Attempts, done.Status, done.LastStatusCode, done.UpdatedAt = 1, domain.DeliveryDelivered, 200, now
						a := domain.Attempt{DeliveryID: d.ID, Number: 1, StatusCode: 200, ResponseBody: "ok", Duration: time.Millisecond, CreatedAt: now}
						if _, err := mode.step.record(ctx, store, done, a); err != nil {
							b.Error(err)
							return
						}
					}
				})
				b.StopTimer()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "deliveries/s")
			})
		}
	}
}

// setUpAsyncBench is setUpBench with one subscription on a pool that
// commits asynchronously, as the worker's does.
func setUpAsyncBench(b *testing.B) (*postgres.Store, domain.Subscription) {
	b.Helper()
	pool, err := postgres.Connect(b.Context(), pgtest.NewDatabase(b), postgres.AsyncCommits())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	pgtest.OpenEnded(b, pool)
	store := postgres.New(pool)
	sub := benchSubscription(time.Now())
	if err := store.CreateSubscription(b.Context(), sub); err != nil {
		b.Fatal(err)
	}
	return store, sub
}

// BenchmarkRecordAttempts measures one RecordAttempts statement on the
// worker's batch pool (generic plans, no hash or merge joins) recording a
// batch of successes, the size of a group commit under load: per delivery,
// the statement's cost should not grow with the batch.
//
//	go test -run '^$' -bench BenchmarkRecordAttempts -count 3 ./adapters/postgres/
func BenchmarkRecordAttempts(b *testing.B) {
	benchBatchStatement(b, func(store *postgres.Store, ds []domain.Delivery, now time.Time) error {
		as := make([]domain.Attempt, len(ds))
		for i := range ds {
			ds[i].Attempts, ds[i].Status, ds[i].LastStatusCode, ds[i].UpdatedAt = 1, domain.DeliveryDelivered, 200, now
			as[i] = domain.Attempt{DeliveryID: ds[i].ID, Number: 1, StatusCode: 200, ResponseBody: "ok", Duration: time.Millisecond, CreatedAt: now}
		}
		return postgres.RecordAttemptsInOne(b.Context(), store, ds, as)
	})
}

// BenchmarkClaimDeliveries is BenchmarkRecordAttempts for the claim: one
// ClaimDeliveries statement on the worker's batch pool leasing a batch of
// due deliveries and reading their events and subscriptions.
//
//	go test -run '^$' -bench BenchmarkClaimDeliveries -count 3 ./adapters/postgres/
func BenchmarkClaimDeliveries(b *testing.B) {
	benchBatchStatement(b, claimsInOne(b, false))
}

// BenchmarkTakeDeliveries is BenchmarkClaimDeliveries for the holders of
// fresh entries: every delivery is reserved long enough, so the batch is
// answered from the entries with one small read (the subscriptions' change
// counter and the events, one per delivery here as in W3; see takeUnread),
// no row read and nothing written.
//
//	go test -run '^$' -bench 'Benchmark(Claim|Take)Deliveries' -count 3 ./adapters/postgres/
func BenchmarkTakeDeliveries(b *testing.B) {
	benchBatchStatement(b, claimsInOne(b, true), func(d *domain.Delivery) { d.ReservedUntil = d.CreatedAt.Add(time.Hour) })
}

// claimsInOne is the statement of BenchmarkClaimDeliveries, or the takes
// of BenchmarkTakeDeliveries when fresh.
func claimsInOne(b *testing.B, fresh bool) func(*postgres.Store, []domain.Delivery, time.Time) error {
	return func(store *postgres.Store, ds []domain.Delivery, now time.Time) error {
		return postgres.ClaimDeliveriesInOne(b.Context(), store, ds, now, time.Minute, fresh)
	}
}

// benchBatchStatement times statement on batches of 64 and 512 due
// deliveries, made anew for each run outside the timer, on a Store with the
// worker's batch pool, and reports the time per delivery.
func benchBatchStatement(b *testing.B, statement func(*postgres.Store, []domain.Delivery, time.Time) error, mods ...func(*domain.Delivery)) {
	for _, rows := range []int{64, 512} {
		b.Run(fmt.Sprintf("rows=%d", rows), func(b *testing.B) {
			pool, batch := pgtest.NewPools(b)
			store := postgres.New(pool, postgres.BatchPool(batch))
			now := time.Now()
			sub := benchSubscription(now)
			if err := store.CreateSubscription(b.Context(), sub); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				ds := readyDeliveries(b, store, sub, rows, now, mods...)
				if err := statement(store, ds, now); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*rows), "µs/delivery")
		})
	}
}
