package queuetest

import (
	"strconv"
	"testing"
	"time"

	"github.com/dispatch-webhooks/dispatch/ports"
)

// benchBatch is how many entries one iteration of BenchPublishConsume
// publishes, reads and acknowledges: the size of a worker's reads.
const benchBatch = 64

// BenchPublishConsume measures what the pipeline asks of a queue per
// entry: entries of 16 keys published in a batch, read back by one
// consumer, and acknowledged. Every adapter runs it, so their figures
// compare (entries/s is reported).
func BenchPublishConsume(b *testing.B, q ports.Queue) {
	ctx := b.Context()
	entries := make([]ports.Entry, benchBatch)
	for i := range entries {
		entries[i] = ports.Entry{Key: "sub_" + strconv.Itoa(i%16), Body: "dlv_01JBENCHMARKBENCHMARKBENCH" + strconv.Itoa(i)}
	}
	const stream = "bench"
	n := 0
	for b.Loop() {
		if err := q.Publish(ctx, stream, entries...); err != nil {
			b.Fatal(err)
		}
		for got := 0; got < benchBatch; {
			msgs, err := q.Read(ctx, stream, "g", "c", benchBatch-got, time.Second)
			if err != nil {
				b.Fatal(err)
			}
			if len(msgs) == 0 {
				b.Fatalf("read nothing after publishing %d entries", benchBatch)
			}
			ids := make([]string, len(msgs))
			for i, m := range msgs {
				ids[i] = m.ID
			}
			if err := q.Ack(ctx, stream, "g", ids...); err != nil {
				b.Fatal(err)
			}
			got += len(msgs)
		}
		n += benchBatch
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "entries/s")
}
