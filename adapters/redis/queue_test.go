package redis

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatch-webhooks/dispatch/adapters/redis/redistest"
	"github.com/dispatch-webhooks/dispatch/ports"
	"github.com/dispatch-webhooks/dispatch/ports/queuetest"
)

func newTestQueue(t testing.TB, client goredis.UniversalClient, opts QueueOptions) *Queue {
	t.Helper()
	q, err := NewQueue(client, opts)
	require.NoError(t, err)
	return q
}

// TestQueue runs the contract suite against the real Redis at REDIS_URL,
// one key prefix per test, with the production options. Trim is exact
// (MINID =), so the suite checks it strictly.
func TestQueue(t *testing.T) {
	queuetest.Run(t, func(t *testing.T) ports.Queue {
		opts := DefaultQueueOptions()
		opts.Prefix = redistest.Prefix(t)
		return newTestQueue(t, redistest.Client(t), opts)
	}, queuetest.Features{
		DropEntryData: func(t *testing.T, q ports.Queue, stream, id string) {
			rq := q.(*Queue)
			rq.dropEntry(t, stream, id)
		},
		// The process in its place: a new connection, the same prefix.
		Restart: func(t *testing.T, q ports.Queue) ports.Queue {
			opts := DefaultQueueOptions()
			opts.Prefix = q.(*Queue).prefix
			return newTestQueue(t, redistest.Client(t), opts)
		},
	})
}

// miniQueue is a Queue on its own miniredis, whose clock the suite drives.
type miniQueue struct {
	*Queue
	mr *miniredis.Miniredis

	mu  sync.Mutex
	now time.Time
}

func (m *miniQueue) advance(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.now = m.now.Add(d)
	m.mr.SetTime(m.now)
}

// TestQueueMiniredis runs the contract suite on miniredis, moving its clock
// instead of waiting for entries to idle. miniredis's XAUTOCLAIM skips
// trimmed entries without reporting them (they stay in its pending list),
// which is all the port lets the suite observe; TestQueueReclaimAcksTrimmedEntries
// checks the pending list on real Redis. miniredis implements what Trim
// uses (XINFO GROUPS, XPENDING's summary, XTRIM MINID, which it always
// applies exactly), so Trim is checked strictly here too; `dispatch dev`
// runs this adapter on miniredis.
func TestQueueMiniredis(t *testing.T) {
	queuetest.Run(t, func(t *testing.T) ports.Queue {
		mr, client := redistest.Mini(t)
		m := &miniQueue{Queue: newTestQueue(t, client, QueueOptions{}), mr: mr, now: time.Now()}
		mr.SetTime(m.now)
		return m
	}, queuetest.Features{
		AdvanceIdle: func(t *testing.T, q ports.Queue, d time.Duration) { q.(*miniQueue).advance(d) },
		DropEntryData: func(t *testing.T, q ports.Queue, stream, id string) {
			m := q.(*miniQueue)
			m.dropEntry(t, stream, id)
		},
	})
}

func TestQueueKeysUseHashTag(t *testing.T) {
	t.Parallel()
	_, client := redistest.Mini(t)
	q := newTestQueue(t, client, QueueOptions{})
	assert.Equal(t, "dispatch:{dispatch:events:0}", q.partitionKey(ports.EventStream, 0))
	assert.Equal(t, "dispatch:{dispatch:deliveries:15}", q.partitionKey(ports.DeliveryStream, 15))
	named := newTestQueue(t, client, QueueOptions{Prefix: "p:", Name: "n", Partitions: 4})
	assert.Equal(t, "p:{n:deliveries:3}", named.partitionKey(ports.DeliveryStream, 3))
}

func TestQueueOptionsValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opts QueueOptions
		ok   bool
	}{
		{"zero value", QueueOptions{}, true},
		{"defaults", DefaultQueueOptions(), true},
		{"brace in prefix", QueueOptions{Prefix: "a{b}:"}, false},
		{"negative max length", QueueOptions{MaxLen: -1}, false},
		{"negative block slice", QueueOptions{BlockSlice: -time.Second}, false},
		{"brace in name", QueueOptions{Name: "a{b"}, false},
		{"negative partitions", QueueOptions{Partitions: -1}, false},
		{"too many partitions", QueueOptions{Partitions: MaxPartitions + 1}, false},
		{"one partition", QueueOptions{Partitions: 1}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.opts.Validate()
			if tc.ok {
				assert.NoError(t, err)
				return
			}
			assert.Error(t, err)
			client := goredis.NewClient(&goredis.Options{})
			defer client.Close()
			_, err = NewQueue(client, tc.opts)
			assert.Error(t, err, "NewQueue validates its options")
		})
	}
	_, err := NewQueue(nil, QueueOptions{})
	assert.Error(t, err)
}

// TestQueueTrimsApproximately publishes past MaxLen and checks the stream is
// kept near it (MAXLEN ~ trims whole macro-nodes, so "near" is loose).
func TestQueueTrimsApproximately(t *testing.T) {
	t.Parallel()
	client := redistest.Client(t)
	q := newTestQueue(t, client, QueueOptions{Prefix: redistest.Prefix(t), MaxLen: 100})
	ctx := t.Context()
	bodies := make([]string, 1000)
	for i := range bodies {
		bodies[i] = strconv.Itoa(i)
	}
	require.NoError(t, q.Publish(ctx, "trim", queuetest.Entries(bodies...)...))
	n, err := client.XLen(ctx, q.keylessKey("trim")).Result()
	require.NoError(t, err)
	assert.Less(t, n, int64(500), "the stream must be trimmed towards MaxLen")
	assert.GreaterOrEqual(t, n, int64(100), "approximate trimming never goes below MaxLen")
}

// TestQueueNoTrimWhenMaxLenZero checks that MaxLen 0, the default, leaves
// MAXLEN out.
func TestQueueNoTrimWhenMaxLenZero(t *testing.T) {
	t.Parallel()
	client := redistest.Client(t)
	opts := DefaultQueueOptions()
	require.Zero(t, opts.MaxLen, "streams are kept short by Trim, not MAXLEN")
	opts.Prefix = redistest.Prefix(t)
	q := newTestQueue(t, client, opts)
	ctx := t.Context()
	bodies := make([]string, 300)
	for i := range bodies {
		bodies[i] = strconv.Itoa(i)
	}
	require.NoError(t, q.Publish(ctx, "keep", queuetest.Entries(bodies...)...))
	n, err := client.XLen(ctx, q.keylessKey("keep")).Result()
	require.NoError(t, err)
	assert.Equal(t, int64(300), n)
}

// TestQueueReclaimAcksTrimmedEntries checks on real Redis that a trimmed
// entry also leaves the pending list (the suite can only see that it is
// not returned).
func TestQueueReclaimAcksTrimmedEntries(t *testing.T) {
	t.Parallel()
	client := redistest.Client(t)
	q := newTestQueue(t, client, QueueOptions{Prefix: redistest.Prefix(t)})
	ctx := t.Context()
	require.NoError(t, q.Publish(ctx, "s", queuetest.Entries("a", "b")...))
	msgs, err := q.Read(ctx, "s", "g", "dead", 10, time.Second)
	require.NoError(t, err)
	require.Len(t, msgs, 2)
	q.dropEntry(t, "s", msgs[0].ID)

	got, err := q.Reclaim(ctx, "s", "g", "rescuer", 0, 10)
	require.NoError(t, err)
	assert.Equal(t, []string{"b"}, []string{got[0].Body})
	pending, err := client.XPending(ctx, q.keylessKey("s"), "g").Result()
	require.NoError(t, err)
	assert.Equal(t, int64(1), pending.Count, "only the entry with data stays pending")
}

// TestQueueRecreatesGroupAfterFlush covers Redis losing everything: reading
// recreates the stream and group instead of failing forever.
func TestQueueRecreatesGroupAfterFlush(t *testing.T) {
	t.Parallel()
	mr, client := redistest.Mini(t)
	q := newTestQueue(t, client, QueueOptions{})
	ctx := t.Context()
	require.NoError(t, q.Publish(ctx, "s", queuetest.Entries("before")...))
	msgs, err := q.Read(ctx, "s", "g", "c", 10, time.Second)
	require.NoError(t, err)
	require.Len(t, msgs, 1)

	mr.FlushAll()
	msgs, err = q.Read(ctx, "s", "g", "c", 10, 0)
	require.NoError(t, err)
	assert.Empty(t, msgs)
	require.NoError(t, q.Publish(ctx, "s", queuetest.Entries("after")...))
	msgs, err = q.Read(ctx, "s", "g", "c", 10, time.Second)
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	assert.Equal(t, "after", msgs[0].Body)
}

// TestQueueErrors checks errors from a dead server are plain
// errors (no go-redis type crosses the seam) and keep ctx identity.
func TestQueueErrors(t *testing.T) {
	t.Parallel()
	mr := miniredis.RunT(t)
	// No retries: the server is gone for good and the test should be quick.
	client := goredis.NewClient(&goredis.Options{Addr: mr.Addr(), MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = client.Close() })
	q := newTestQueue(t, client, QueueOptions{})
	mr.Close()
	ctx := t.Context()

	err := q.Publish(ctx, "s", queuetest.Entries("x")...)
	require.Error(t, err)
	var redisErr goredis.Error
	assert.NotErrorAs(t, err, &redisErr)
	assert.Error(t, q.Ping(ctx))
	_, err = q.Read(ctx, "s", "g", "c", 1, 0)
	assert.Error(t, err)

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = q.Read(cancelled, "s", "g", "c", 1, time.Second)
	assert.ErrorIs(t, err, context.Canceled)
}

func TestConnect(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	client, err := Connect(ctx, redistest.URL())
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })
	require.NoError(t, client.Ping(ctx).Err())

	// The DB index in the URL is honoured.
	mr := miniredis.RunT(t)
	db5, err := Connect(ctx, "redis://"+mr.Addr()+"/5")
	require.NoError(t, err)
	t.Cleanup(func() { _ = db5.Close() })
	require.NoError(t, db5.Set(ctx, "k", "v", 0).Err())
	assert.Equal(t, "v", mustGet(t, mr.DB(5), "k"))

	_, err = Connect(ctx, "redis://:secret@127.0.0.1:1/0")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "127.0.0.1:1")
	assert.NotContains(t, err.Error(), "secret", "the password must not reach logs")

	_, err = Connect(ctx, "http://nope")
	assert.Error(t, err)
}

func mustGet(t *testing.T, db *miniredis.RedisDB, key string) string {
	t.Helper()
	v, err := db.Get(key)
	require.NoError(t, err)
	return v
}

func BenchmarkQueuePublish(b *testing.B) {
	client := redistest.Client(b)
	opts := DefaultQueueOptions()
	opts.Prefix = redistest.Prefix(b)
	q := newTestQueue(b, client, opts)
	ctx := b.Context()
	batch := make([]string, 100)
	for i := range batch {
		batch[i] = "01J0000000000000000000000" + strconv.Itoa(i)
	}
	b.ResetTimer()
	for b.Loop() {
		if err := q.Publish(ctx, "bench", queuetest.Entries(batch...)...); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*len(batch))/b.Elapsed().Seconds(), "entries/s")
}

// BenchmarkQueueConsume measures the consuming side: reading entries
// through a consumer group, 100 at a time, and acknowledging them in one
// XACK (what the Consumer's ack batcher does under load).
func BenchmarkQueueConsume(b *testing.B) {
	client := redistest.Client(b)
	opts := DefaultQueueOptions()
	opts.Prefix = redistest.Prefix(b)
	q := newTestQueue(b, client, opts)
	ctx := b.Context()
	const batch = 100
	bodies := make([]string, batch)
	for i := range bodies {
		bodies[i] = "dlv_01J0000000000000000000000" + strconv.Itoa(i)
	}
	read := 0
	for b.Loop() {
		b.StopTimer()
		if err := q.Publish(ctx, "bench", queuetest.Entries(bodies...)...); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		msgs, err := q.Read(ctx, "bench", "workers", "w1", batch, time.Second)
		if err != nil || len(msgs) != batch {
			b.Fatalf("read %d entries, %v; want %d", len(msgs), err, batch)
		}
		ids := make([]string, len(msgs))
		for i, m := range msgs {
			ids[i] = m.ID
		}
		if err := q.Ack(ctx, "bench", "workers", ids...); err != nil {
			b.Fatal(err)
		}
		read += len(msgs)
	}
	b.ReportMetric(float64(read)/b.Elapsed().Seconds(), "entries/s")
}

// BenchmarkPublishConsume is the round trip every queue adapter measures
// (queuetest.BenchPublishConsume).
func BenchmarkPublishConsume(b *testing.B) {
	opts := DefaultQueueOptions()
	opts.Prefix = redistest.Prefix(b)
	queuetest.BenchPublishConsume(b, newTestQueue(b, redistest.Client(b), opts))
}

// keylessKey is the key of the partition of stream that entries without a
// key go to.
func (q *Queue) keylessKey(stream string) string {
	return q.partitionKey(stream, q.partitionOf(""))
}

// locate is the key of the partition of message id and its id there.
func (q *Queue) locate(t testing.TB, stream, id string) (key, streamID string) {
	t.Helper()
	n, streamID, ok := q.splitMessageID(id)
	require.True(t, ok, "message id %q", id)
	return q.partitionKey(stream, n), streamID
}

// dropEntry deletes the data of message id, leaving it pending.
func (q *Queue) dropEntry(t testing.TB, stream, id string) {
	t.Helper()
	key, streamID := q.locate(t, stream, id)
	require.NoError(t, q.client.XDel(t.Context(), key, streamID).Err())
}

// TestQueueReadThatKeepsUpIsOneRoundTrip: a consumer whose last read left
// every partition empty waits for the next entry with one blocking read,
// neither sweeping the partitions before it nor after; once a read may
// have left entries behind (a partition gave its whole share), the next
// read sweeps and fills its batch.
func TestQueueReadThatKeepsUpIsOneRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	client, counter := countingClient(t)
	opts := DefaultQueueOptions()
	opts.Prefix = redistest.Prefix(t)
	q := newTestQueue(t, client, opts)
	count := 2 * q.partitions

	require.NoError(t, q.Publish(ctx, "s", queuetest.Entries("first")...))
	msgs, err := q.Read(ctx, "s", "g", "c", count, time.Second)
	require.NoError(t, err)
	require.Len(t, msgs, 1)

	// The next entry arrives while the consumer waits.
	blocked := make(chan struct{}, 1)
	counter.mu.Lock()
	counter.blocked = blocked
	counter.mu.Unlock()
	counter.take()
	read := make(chan []ports.Message, 1)
	go func() {
		msgs, err := q.Read(ctx, "s", "g", "c", count, 10*time.Second)
		assert.NoError(t, err)
		read <- msgs
	}()
	<-blocked
	counter.mu.Lock()
	counter.blocked = nil
	counter.mu.Unlock()
	require.NoError(t, q.Publish(ctx, "s", queuetest.Entries("second")...))
	msgs = <-read
	require.Len(t, msgs, 1)
	assert.Equal(t, "second", msgs[0].Body)
	var reads []string
	for _, name := range counter.take() {
		if name != "MULTI" && name != "XADD" && name != "EXEC" { // the publish
			reads = append(reads, name)
		}
	}
	assert.Equal(t, []string{"XREADGROUP"}, reads, "one blocking read, no sweep")

	// Many entries in one partition: the blocking read takes its share
	// (count/partitions) of them, then the batch is filled from the rest.
	var entries []ports.Entry
	for i := range 3 * count {
		entries = append(entries, ports.Entry{Key: "one-key", Body: strconv.Itoa(i)})
	}
	require.NoError(t, q.Publish(ctx, "s", entries...))
	msgs, err = q.Read(ctx, "s", "g", "c", count, time.Second)
	require.NoError(t, err)
	assert.Len(t, msgs, count, "a full batch, not one partition's share")
	msgs, err = q.Read(ctx, "s", "g", "c", count, time.Second)
	require.NoError(t, err)
	assert.Len(t, msgs, count)
	msgs, err = q.Read(ctx, "s", "g", "c", count, time.Second)
	require.NoError(t, err)
	assert.Len(t, msgs, count)
	msgs, err = q.Read(ctx, "s", "g", "c", count, time.Millisecond)
	require.NoError(t, err)
	assert.Empty(t, msgs)

	// Idle: one blocking read for the whole block, longer than a slice:
	// no slices, no sweep.
	counter.take()
	msgs, err = q.Read(ctx, "s", "g", "c", count, 3*q.blockSlice)
	require.NoError(t, err)
	assert.Empty(t, msgs)
	assert.Equal(t, []string{"XREADGROUP"}, counter.take(), "one blocking read while idle")

	// The streams flushed while the reader kept up: the blocking read
	// finds no group, and the sweep makes it again.
	for _, key := range q.partitionKeys("s") {
		require.NoError(t, client.Del(ctx, key).Err())
	}
	require.NoError(t, q.Publish(ctx, "s", queuetest.Entries("after the flush")...))
	msgs, err = q.Read(ctx, "s", "g", "c", count, 10*time.Second)
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	assert.Equal(t, "after the flush", msgs[0].Body)
}
