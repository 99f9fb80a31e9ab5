package kafka_test

import (
	"sync"
	"testing"
	"time"

	"github.com/dispatch-webhooks/dispatch/adapters/kafka"
	"github.com/dispatch-webhooks/dispatch/adapters/kafka/kafkatest"
	"github.com/dispatch-webhooks/dispatch/ports"
	"github.com/dispatch-webhooks/dispatch/ports/queuetest"
)

// clock is a Queue's clock that tests move.
type clock struct {
	mu  sync.Mutex
	off time.Duration
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.off)
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.off += d
}

type clockedQueue struct {
	*kafka.Queue
	clock      *clock
	prefix     string
	partitions int
}

func newQueue(t testing.TB, partitions int) clockedQueue {
	t.Helper()
	return openQueue(t, kafkatest.Prefix(t), partitions)
}

// openQueue is a process's queue on prefix, closed when t ends.
func openQueue(t testing.TB, prefix string, partitions int) clockedQueue {
	t.Helper()
	c := &clock{}
	q, err := kafka.New(kafka.Options{
		Brokers:    kafkatest.Brokers(t),
		Prefix:     prefix,
		Partitions: partitions,
		Now:        c.now,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(q.Close)
	return clockedQueue{Queue: q, clock: c, prefix: prefix, partitions: partitions}
}

// TestQueue runs the contract suite on an in-process kfake cluster (or the
// brokers of KAFKA_BROKERS), a prefix per test.
func TestQueue(t *testing.T) {
	queuetest.Run(t, func(t *testing.T) ports.Queue { return newQueue(t, 4) }, queuetest.Features{
		AdvanceIdle:     func(t *testing.T, q ports.Queue, d time.Duration) { q.(clockedQueue).clock.advance(d) },
		TrimApproximate: true,
		Restart: func(t *testing.T, q ports.Queue) ports.Queue {
			old := q.(clockedQueue)
			old.Close()
			return openQueue(t, old.prefix, old.partitions)
		},
	})
}

func TestQueueLag(t *testing.T) {
	queuetest.RunLag(t, func(t *testing.T) queuetest.LagQueue { return newQueue(t, 4) })
}

// BenchmarkPublishConsume is queuetest.BenchPublishConsume on kfake:
//
//	go test -run '^$' -bench PublishConsume -benchtime 3s ./adapters/kafka/
func BenchmarkPublishConsume(b *testing.B) {
	queuetest.BenchPublishConsume(b, newQueue(b, kafka.DefaultPartitions))
}
