package redis

import (
	"math"
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatch-webhooks/dispatch/adapters/redis/redistest"
	"github.com/dispatch-webhooks/dispatch/ports"
	"github.com/dispatch-webhooks/dispatch/ports/queuetest"
)

// onBothRedises runs test against the real Redis and against miniredis,
// which `dispatch dev` runs the queue on.
func onBothRedises(t *testing.T, test func(t *testing.T, q *Queue, client goredis.UniversalClient)) {
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		client := redistest.Client(t)
		test(t, newTestQueue(t, client, QueueOptions{Prefix: redistest.Prefix(t)}), client)
	})
	t.Run("miniredis", func(t *testing.T) {
		t.Parallel()
		_, client := redistest.Mini(t)
		test(t, newTestQueue(t, client, QueueOptions{}), client)
	})
}

// TestQueueTrimIsExact checks that Trim cuts inside a macro-node (100
// entries by default) instead of keeping the node whole, as MINID ~ would.
func TestQueueTrimIsExact(t *testing.T) {
	t.Parallel()
	onBothRedises(t, func(t *testing.T, q *Queue, client goredis.UniversalClient) {
		ctx := t.Context()
		bodies := make([]string, 250)
		for i := range bodies {
			bodies[i] = strconv.Itoa(i)
		}
		require.NoError(t, q.Publish(ctx, "s", queuetest.Entries(bodies...)...))
		msgs, err := q.Read(ctx, "s", "g", "c", len(bodies), time.Second)
		require.NoError(t, err)
		require.Len(t, msgs, len(bodies))
		require.NoError(t, q.Ack(ctx, "s", "g", idsOf(msgs[:150])...))

		require.NoError(t, q.Trim(ctx, "s"))
		n, err := client.XLen(ctx, q.keylessKey("s")).Result()
		require.NoError(t, err)
		assert.Equal(t, int64(100), n, "Trim keeps exactly the entries after the last acknowledged prefix")
		first, err := client.XRangeN(ctx, q.keylessKey("s"), "-", "+", 1).Result()
		require.NoError(t, err)
		require.Len(t, first, 1)
		_, want := q.locate(t, "s", msgs[150].ID)
		assert.Equal(t, want, first[0].ID)
	})
}

// TestQueueOddEntries checks that an entry another writer added without the
// body field comes back with Body "" from Read and Reclaim, between the
// well-formed ones, instead of failing the batch, and can be acknowledged.
func TestQueueOddEntries(t *testing.T) {
	t.Parallel()
	onBothRedises(t, func(t *testing.T, q *Queue, client goredis.UniversalClient) {
		ctx := t.Context()
		key := q.keylessKey("s")
		for _, values := range [][]string{
			{bodyField, "first"},
			{"unexpected", "field"},
			{"extra", "1", bodyField, "last"},
		} {
			require.NoError(t, client.XAdd(ctx, &goredis.XAddArgs{Stream: key, Values: values}).Err())
		}

		read, err := q.Read(ctx, "s", "g", "dead", 10, time.Second)
		require.NoError(t, err)
		assert.Equal(t, []string{"first", "", "last"}, bodiesOf(read))

		reclaimed, err := q.Reclaim(ctx, "s", "g", "rescuer", 0, 10)
		require.NoError(t, err)
		assert.Equal(t, []string{"first", "", "last"}, bodiesOf(reclaimed))
		assert.Equal(t, idsOf(read), idsOf(reclaimed))

		require.NoError(t, q.Ack(ctx, "s", "g", idsOf(reclaimed)...))
		pending, err := client.XPending(ctx, key, "g").Result()
		require.NoError(t, err)
		assert.Zero(t, pending.Count, "every entry, odd or not, was acknowledged")
	})
}

func TestParseAutoclaim(t *testing.T) {
	t.Parallel()
	reply := []any{
		"7-0",
		[]any{
			"not an entry",
			[]any{},
			[]any{int64(5), []any{bodyField, "id is not a string"}},
			[]any{"1-1", []any{"unexpected", "field"}},
			[]any{"1-2", []any{bodyField, "ok"}},
			[]any{"1-3", nil}, // Redis 6.2: pending, data trimmed
			[]any{"1-4", map[any]any{bodyField: "resp3"}},
			[]any{"1-5", []any{bodyField, int64(9)}},
		},
		[]any{"1-6", int64(1)},
	}
	next, claimed, deleted, err := parseAutoclaim(2, reply)
	require.NoError(t, err, "odd entries must not fail the page")
	assert.Equal(t, "7-0", next)
	assert.Equal(t, []claimedEntry{
		{msg: ports.Message{ID: "2/1-1"}, streamID: "1-1"},
		{msg: ports.Message{ID: "2/1-2", Body: "ok"}, streamID: "1-2"},
		{msg: ports.Message{ID: "2/1-3"}, streamID: "1-3", trimmed: true},
		{msg: ports.Message{ID: "2/1-4", Body: "resp3"}, streamID: "1-4"},
		{msg: ports.Message{ID: "2/1-5"}, streamID: "1-5"},
	}, claimed)
	assert.Equal(t, []string{"1-6"}, deleted)

	_, _, _, err = parseAutoclaim(0, []any{"0-0"})
	assert.Error(t, err, "a reply without entries is malformed")
	_, _, _, err = parseAutoclaim(0, []any{int64(0), []any{}})
	assert.Error(t, err, "a reply without a cursor is malformed")
}

func TestStreamID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, want, next string
	}{
		{"0-0", "0-0", "0-1"},
		{"0", "0-0", "0-1"}, // miniredis's last-delivered-id of a group created at 0
		{"1700000000000-3", "1700000000000-3", "1700000000000-4"},
		{"5-" + strconv.FormatUint(math.MaxUint64, 10), "5-" + strconv.FormatUint(math.MaxUint64, 10), "6-0"},
	}
	for _, tc := range tests {
		id, err := parseStreamID(tc.in)
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, id.String())
		assert.Equal(t, tc.next, id.next().String())
		assert.Equal(t, -1, id.compare(id.next()))
	}
	top := streamID{ms: math.MaxUint64, seq: math.MaxUint64}
	assert.Equal(t, top, top.next(), "the largest id has no successor")
	for _, bad := range []string{"", "x", "1-x", "-1", "1-2-3"} {
		_, err := parseStreamID(bad)
		assert.Error(t, err, "%q", bad)
	}
}

func idsOf(msgs []ports.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
}

func bodiesOf(msgs []ports.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.Body
	}
	return out
}
