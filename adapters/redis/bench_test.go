package redis

import (
	"context"
	"runtime"
	"testing"

	"github.com/dispatch-webhooks/dispatch/adapters/redis/redistest"
	"github.com/dispatch-webhooks/dispatch/ports"
	"github.com/dispatch-webhooks/dispatch/ports/queuetest"
)

// BenchmarkIngestPublish measures the queue's share of durable ingest: 64
// publishers appending one event id each to the event stream of the Redis
// at REDIS_URL, as the api role does after each commit. SPEC §6 budgets a
// pipelined stream op at ~4 µs on a 2-core machine:
//
//	go test -run '^$' -bench BenchmarkIngest -count 3 ./adapters/...
func BenchmarkIngestPublish(b *testing.B) {
	opts := DefaultQueueOptions()
	opts.Prefix = redistest.Prefix(b)
	q := newTestQueue(b, redistest.Client(b), opts)
	const publishers = 64
	b.SetParallelism(max(1, publishers/runtime.GOMAXPROCS(0)))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			if err := q.Publish(ctx, ports.EventStream, queuetest.Entries("evt_01JBENCHMARKBENCHMARKBENCHM")...); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}
