package memory_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatch-webhooks/dispatch/adapters/memory"
	"github.com/dispatch-webhooks/dispatch/ports"
	"github.com/dispatch-webhooks/dispatch/ports/queuetest"
)

// queueClock is a settable clock for one queue.
type queueClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *queueClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *queueClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// clockedQueue is a Queue with the clock the suite drives.
type clockedQueue struct {
	*memory.Queue
	clock *queueClock
}

func TestQueue(t *testing.T) {
	t.Parallel()
	queuetest.Run(t, func(t *testing.T) ports.Queue {
		clock := &queueClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
		return clockedQueue{Queue: memory.NewQueue(memory.QueueOptions{Now: clock.Now}), clock: clock}
	}, queuetest.Features{
		AdvanceIdle: func(t *testing.T, q ports.Queue, d time.Duration) { q.(clockedQueue).clock.Advance(d) },
		DropEntryData: func(t *testing.T, q ports.Queue, stream, id string) {
			require.NoError(t, q.(clockedQueue).DropEntryForTest(stream, id))
		},
	})
}

// TestQueueRealClock runs the suite on the wall clock, as `dispatch dev`
// uses the queue, so the real-time paths of the suite stay exercised too.
func TestQueueRealClock(t *testing.T) {
	t.Parallel()
	queuetest.Run(t, func(t *testing.T) ports.Queue {
		return memory.NewQueue(memory.QueueOptions{})
	}, queuetest.Features{})
}

func TestQueueMaxLenTrimsOldest(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	clock := &queueClock{now: time.Unix(1000, 0)}
	q := memory.NewQueue(memory.QueueOptions{Now: clock.Now, MaxLen: 3})

	require.NoError(t, q.Publish(ctx, "s", queuetest.Entries("0", "1")...))
	read, err := q.Read(ctx, "s", "g", "dead", 10, 0)
	require.NoError(t, err)
	require.Len(t, read, 2)
	for i := 2; i < 6; i++ {
		require.NoError(t, q.Publish(ctx, "s", queuetest.Entries(strconv.Itoa(i))...))
	}

	// Entries 0..2 were trimmed; a new group starts at what is left.
	late, err := q.Read(ctx, "late", "g", "c", 10, 0)
	require.NoError(t, err)
	assert.Empty(t, late)
	fresh, err := q.Read(ctx, "s", "g2", "c", 10, 0)
	require.NoError(t, err)
	assert.Equal(t, []string{"3", "4", "5"}, queueBodies(fresh))

	// The two pending entries of g lost their data: acknowledged, not returned.
	clock.Advance(time.Minute)
	reclaimed, err := q.Reclaim(ctx, "s", "g", "rescuer", time.Second, 10)
	require.NoError(t, err)
	assert.Empty(t, reclaimed)
}

func TestQueueIDsAreOrderedAndAckParsesThem(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	clock := &queueClock{now: time.UnixMilli(5000)}
	q := memory.NewQueue(memory.QueueOptions{Now: clock.Now})
	require.NoError(t, q.Publish(ctx, "s", queuetest.Entries("a", "b")...))
	clock.Advance(-time.Second) // a clock going backwards must not reorder ids
	require.NoError(t, q.Publish(ctx, "s", queuetest.Entries("c")...))
	msgs, err := q.Read(ctx, "s", "g", "c", 10, 0)
	require.NoError(t, err)
	assert.Equal(t, []string{"5000-0", "5000-1", "5000-2"}, []string{msgs[0].ID, msgs[1].ID, msgs[2].ID})
	assert.Error(t, q.Ack(ctx, "s", "g", "not-an-id"), "a malformed id is an error, as in Redis")
}

func TestQueueCancelledContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	q := memory.NewQueue(memory.QueueOptions{})
	assert.ErrorIs(t, q.Publish(ctx, "s", queuetest.Entries("x")...), context.Canceled)
	_, err := q.Read(ctx, "s", "g", "c", 1, time.Second)
	assert.ErrorIs(t, err, context.Canceled)
	assert.ErrorIs(t, q.Ack(ctx, "s", "g", "1-1"), context.Canceled)
	_, err = q.Reclaim(ctx, "s", "g", "c", 0, 1)
	assert.ErrorIs(t, err, context.Canceled)
}

func queueBodies(msgs []ports.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.Body
	}
	return out
}

// BenchmarkPublishConsume is the round trip every queue adapter measures
// (queuetest.BenchPublishConsume).
func BenchmarkPublishConsume(b *testing.B) {
	queuetest.BenchPublishConsume(b, memory.NewQueue(memory.QueueOptions{}))
}
