package kafka_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/dispatch-webhooks/dispatch/adapters/kafka/kafkatest"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// TestRebalanceLosesNothing has a second process join a group whose only
// member read every entry and acknowledged a third of them. Partitions
// move to the newcomer, and with them the entries still unacknowledged in
// them; those the first process keeps come back to it by Reclaim. In the
// end every entry was acknowledged by one of the two.
func TestRebalanceLosesNothing(t *testing.T) {
	t.Parallel()
	const stream, group, total = "rebalance", "g", 64
	prefix := kafkatest.Prefix(t)
	first := openQueue(t, prefix, 8)
	ctx := t.Context()
	var entries []ports.Entry
	for i := range total {
		entries = append(entries, ports.Entry{Key: "sub_" + strconv.Itoa(i%16), Body: "e" + strconv.Itoa(i)})
	}
	if err := first.Publish(ctx, stream, entries...); err != nil {
		t.Fatal(err)
	}
	var read []ports.Message
	deadline := time.Now().Add(20 * time.Second)
	for len(read) < total {
		if time.Now().After(deadline) {
			t.Fatalf("the first process read %d of %d entries", len(read), total)
		}
		msgs, err := first.Read(ctx, stream, group, "c1", total, 200*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		read = append(read, msgs...)
	}
	done := map[string]bool{}
	var ids []string
	for i, m := range read {
		if i%3 == 0 {
			ids = append(ids, m.ID)
			done[m.Body] = true
		}
	}
	if err := first.Ack(ctx, stream, group, ids...); err != nil {
		t.Fatal(err)
	}

	second := openQueue(t, prefix, 8)
	movedToSecond := 0
	for len(done) < total {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d entries acknowledged; the second process took over %d", len(done), total, movedToSecond)
		}
		for i, q := range []clockedQueue{first, second} {
			msgs, err := q.Read(ctx, stream, group, "c", total, 100*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			if i == 1 {
				movedToSecond += len(msgs)
			}
			if movedToSecond > 0 {
				// Only once partitions moved: what the first process
				// still holds is its own to finish.
				reclaimed, err := q.Reclaim(ctx, stream, group, "c", 0, total)
				if err != nil {
					t.Fatal(err)
				}
				msgs = append(msgs, reclaimed...)
			}
			var ids []string
			for _, m := range msgs {
				ids = append(ids, m.ID)
				done[m.Body] = true
			}
			if err := q.Ack(ctx, stream, group, ids...); err != nil {
				t.Fatal(err)
			}
		}
	}
	if movedToSecond == 0 {
		t.Error("no partition moved to the second process")
	}
	for _, q := range []clockedQueue{first, second} {
		lag, err := q.Lag(ctx, stream, group)
		if err != nil {
			t.Fatal(err)
		}
		if lag.Total() != 0 {
			t.Errorf("lag %+v after every entry was acknowledged", lag)
		}
	}
}
