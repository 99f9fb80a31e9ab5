package queuetest

import (
	"context"
	"testing"
	"time"

	"github.com/dispatch-webhooks/dispatch/ports"
)

// LagQueue is a queue that reports consumer-group lag.
type LagQueue interface {
	ports.Queue
	ports.StreamLag
}

// RunLag checks ports.StreamLag: unread and unacknowledged entries.
func RunLag(t *testing.T, newQueue func(t *testing.T) LagQueue) {
	t.Run("Lag", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		q := newQueue(t)
		lag := func(unread, pending int64, why string) {
			t.Helper()
			got, err := q.Lag(ctx, "lagged", "g")
			if err != nil {
				t.Fatal(err)
			}
			if want := (ports.GroupLag{Unread: unread, Pending: pending}); got != want {
				t.Errorf("lag = %+v, want %+v (%s)", got, want, why)
			}
			if got.Total() != unread+pending {
				t.Errorf("total = %d, want %d", got.Total(), unread+pending)
			}
		}
		lag(0, 0, "no stream")
		if err := q.Publish(ctx, "lagged", Entries("a", "b", "c", "d")...); err != nil {
			t.Fatal(err)
		}
		lag(4, 0, "no group yet: every entry is unread")
		msgs, err := q.Read(ctx, "lagged", "g", "c1", 3, 0)
		if err != nil || len(msgs) != 3 {
			t.Fatalf("read %d entries (%v), want 3", len(msgs), err)
		}
		lag(1, 3, "three read but unacknowledged, one unread")
		if err := q.Ack(ctx, "lagged", "g", msgs[0].ID, msgs[1].ID); err != nil {
			t.Fatal(err)
		}
		lag(1, 1, "one pending, one unread")
		rest, err := q.Read(ctx, "lagged", "g", "c1", 10, time.Millisecond)
		if err != nil || len(rest) != 1 {
			t.Fatalf("read %d entries (%v), want 1", len(rest), err)
		}
		if err := q.Ack(ctx, "lagged", "g", msgs[2].ID, rest[0].ID); err != nil {
			t.Fatal(err)
		}
		lag(0, 0, "everything acknowledged")
	})
}
