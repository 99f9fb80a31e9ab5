package nats_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strconv"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/dispatch-webhooks/dispatch/adapters/nats"
	"github.com/dispatch-webhooks/dispatch/ports"
	"github.com/dispatch-webhooks/dispatch/ports/queuetest"
)

// testAckWait is the visibility timeout of the queues under test: long
// enough that an entry is never redelivered while a test still holds it,
// even on a loaded machine under the race detector, short enough that
// redelivery tests stay quick.
const testAckWait = 5 * time.Second

// url is the NATS server the tests use: $NATS_URL, or the local one.
func url() string {
	if u := os.Getenv("NATS_URL"); u != "" {
		return u
	}
	return "nats://127.0.0.1:4222"
}

// connect connects to the test server for t.
func connect(t testing.TB) *natsgo.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nc, err := nats.Connect(ctx, url())
	require.NoError(t, err, "NATS with JetStream at %s", url())
	t.Cleanup(nc.Close)
	return nc
}

// newQueue returns a queue with a prefix of its own, whose stream is
// deleted when t ends.
func newQueue(t testing.TB, opts nats.QueueOptions) *nats.Queue {
	t.Helper()
	nc := connect(t)
	if opts.Prefix == "" {
		opts.Prefix = testPrefix()
	}
	if opts.AckWait == 0 {
		opts.AckWait = testAckWait
	}
	q, err := nats.NewQueue(nc, opts)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := q.DeleteStreams(ctx); err != nil {
			t.Errorf("delete the streams of %s: %v", q.Prefix(), err)
		}
	})
	return q
}

func testPrefix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "qt_" + hex.EncodeToString(b)
}

func TestQueue(t *testing.T) {
	t.Parallel()
	queuetest.Run(t, func(t *testing.T) ports.Queue {
		return newQueue(t, nats.QueueOptions{Partitions: 4})
	}, queuetest.Features{
		RedeliverAfter: testAckWait,
		// The 2.9 server here: a purge may lose acknowledgements above a
		// consumer's ack floor (Queue.Trim).
		TrimMayRedeliver: true,
		DropEntryData: func(t *testing.T, q ports.Queue, stream, id string) {
			seq, err := strconv.ParseUint(id, 10, 64)
			require.NoError(t, err)
			js, err := jetstream.New(connect(t))
			require.NoError(t, err)
			s, err := js.Stream(t.Context(), q.(*nats.Queue).StreamName(stream))
			require.NoError(t, err)
			require.NoError(t, s.DeleteMsg(t.Context(), seq))
		},
		// The process in its place: a new connection, the same prefix;
		// what the old one read and did not acknowledge comes back after
		// AckWait.
		Restart: func(t *testing.T, q ports.Queue) ports.Queue {
			again, err := nats.NewQueue(connect(t), nats.QueueOptions{Prefix: q.(*nats.Queue).Prefix(), Partitions: 4, AckWait: testAckWait})
			require.NoError(t, err)
			return again
		},
	})
}

func TestQueueLag(t *testing.T) {
	t.Parallel()
	queuetest.RunLag(t, func(t *testing.T) queuetest.LagQueue {
		return newQueue(t, nats.QueueOptions{Partitions: 4})
	})
}

func BenchmarkPublishConsume(b *testing.B) {
	queuetest.BenchPublishConsume(b, newQueue(b, nats.QueueOptions{}))
}

// TestQueueRecreatesDeletedStreams deletes the streams under a queue that
// uses them, as an operator might: the next append and read create them
// again, and the group reads what came after.
func TestQueueRecreatesDeletedStreams(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	q := newQueue(t, nats.QueueOptions{})
	require.NoError(t, q.Publish(ctx, "events", queuetest.Entries("before")...))
	msgs, err := q.Read(ctx, "events", "g", "c", 10, time.Second)
	require.NoError(t, err)
	require.Len(t, msgs, 1)

	other, err := nats.NewQueue(connect(t), nats.QueueOptions{Prefix: q.Prefix()})
	require.NoError(t, err)
	require.NoError(t, other.DeleteStreams(ctx))

	require.NoError(t, q.Publish(ctx, "events", queuetest.Entries("after")...))
	var got []string
	deadline := time.Now().Add(10 * time.Second)
	for len(got) == 0 && time.Now().Before(deadline) {
		msgs, err := q.Read(ctx, "events", "g", "c", 10, 200*time.Millisecond)
		require.NoError(t, err)
		for _, m := range msgs {
			got = append(got, m.Body)
		}
	}
	require.Equal(t, []string{"after"}, got)
}

// TestQueuePartitionsByKey checks the subjects entries land on: one per
// partition, "<prefix>.<stream>.<partition>", every entry of a key on one.
func TestQueuePartitionsByKey(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	q := newQueue(t, nats.QueueOptions{Partitions: 4})
	var entries []ports.Entry
	for i := range 64 {
		entries = append(entries, ports.Entry{Key: "sub_" + strconv.Itoa(i%16), Body: strconv.Itoa(i)})
	}
	require.NoError(t, q.Publish(ctx, ports.DeliveryStream, entries...))

	js, err := jetstream.New(connect(t))
	require.NoError(t, err)
	s, err := js.Stream(ctx, q.StreamName(ports.DeliveryStream))
	require.NoError(t, err)
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(">"))
	require.NoError(t, err)
	want := map[string]uint64{}
	for p := range 4 {
		want[q.Prefix()+".deliveries."+strconv.Itoa(p)] = 0
	}
	for subject, n := range info.State.Subjects {
		_, ok := want[subject]
		require.True(t, ok, "entries on subject %s, want one of %v", subject, want)
		want[subject] = n
		require.Zero(t, n%4, "subject %s holds %d entries: a key's 4 entries were split", subject, n)
	}
	for subject, n := range want {
		require.NotZero(t, n, "16 keys left partition %s empty", subject)
	}
}

func TestQueueOptionsValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		opts nats.QueueOptions
		want string
	}{
		{nats.QueueOptions{}, ""},
		{nats.QueueOptions{Prefix: "team_a-1", Partitions: 1024, AckWait: time.Second}, ""},
		{nats.QueueOptions{Prefix: "team.a"}, `prefix must be letters, digits, '-' and '_' (a JetStream stream name and subject token), got "team.a"`},
		{nats.QueueOptions{Prefix: "a>"}, `got "a>"`},
		{nats.QueueOptions{Partitions: -1}, "partitions must be >= 1 (0 means 16), got -1"},
		{nats.QueueOptions{AckWait: -time.Second}, "ack wait must be > 0 (0 means 30s), got -1s"},
	} {
		err := tc.opts.Validate()
		if tc.want == "" {
			require.NoError(t, err, "%+v", tc.opts)
			continue
		}
		require.ErrorContains(t, err, tc.want, "%+v", tc.opts)
	}
}
