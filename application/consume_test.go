package application_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dispatch-webhooks/dispatch/adapters/memory"
	"github.com/dispatch-webhooks/dispatch/application"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// pendingAfter reports how many entries of stream are still unacknowledged
// for group: it reclaims everything idle for at least zero time.
func pendingAfter(t *testing.T, q ports.Queue, stream, group string) []string {
	t.Helper()
	msgs, err := q.Reclaim(context.Background(), stream, group, "inspector", 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var bodies []string
	for _, m := range msgs {
		bodies = append(bodies, m.Body)
	}
	return bodies
}

func TestConsumerAcknowledgesOnlyWhatItFinished(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	q := memory.NewQueue(memory.QueueOptions{})
	if err := q.Publish(ctx, "s", "ok-1", "fail-1", "ok-2", "slow-1"); err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	release := make(chan struct{})
	var handled atomic.Int32
	c := &application.Consumer{
		Queue: q, Stream: "s", Group: "g", Name: "c1", Batch: 10, Block: 10 * time.Millisecond,
		Concurrency: 4, PerEntry: true,
		Handle: func(_ context.Context, msgs []ports.Message) []string {
			defer handled.Add(1)
			switch msgs[0].Body {
			case "fail-1":
				return nil // not finished: must stay pending
			case "slow-1":
				close(started)
				<-release // still working when shutdown begins
			}
			return []string{msgs[0].ID}
		},
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	<-started
	cancel() // shutdown while slow-1 is in flight
	select {
	case err := <-done:
		t.Fatalf("Run returned (%v) before the handler in flight finished", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n := handled.Load(); n != 4 {
		t.Fatalf("handled %d entries, want 4", n)
	}
	if got := pendingAfter(t, q, "s", "g"); len(got) != 1 || got[0] != "fail-1" {
		t.Errorf("unacknowledged after shutdown = %v, want [fail-1]", got)
	}
}

func TestConsumerDropsMalformedEntries(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	q := memory.NewQueue(memory.QueueOptions{})
	if err := q.Publish(ctx, "s", "good", "", "junk", "good"); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var malformed, handled []string
	c := &application.Consumer{
		Queue: q, Stream: "s", Group: "g", Name: "c1", Batch: 10, Block: 10 * time.Millisecond,
		Valid: func(body string) bool { return body == "good" },
		OnMalformed: func(m ports.Message) {
			mu.Lock()
			malformed = append(malformed, m.Body)
			mu.Unlock()
		},
		Handle: func(_ context.Context, msgs []ports.Message) []string {
			mu.Lock()
			defer mu.Unlock()
			var ack []string
			for _, m := range msgs {
				handled = append(handled, m.Body)
				ack = append(ack, m.ID)
			}
			return ack
		},
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		n := len(handled) + len(malformed)
		mu.Unlock()
		if n == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for 4 entries to be handled or dropped; got %d", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	if len(handled) != 2 || len(malformed) != 2 {
		t.Errorf("handled %v, dropped %v; want 2 good handled, 2 malformed dropped", handled, malformed)
	}
	if got := pendingAfter(t, q, "s", "g"); len(got) != 0 {
		t.Errorf("still pending: %v, want nothing (malformed entries are acknowledged)", got)
	}
}
