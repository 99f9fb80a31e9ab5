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
	"github.com/dispatch-webhooks/dispatch/ports/queuetest"
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
	if err := q.Publish(ctx, "s", queuetest.Entries("ok-1", "fail-1", "ok-2", "slow-1")...); err != nil {
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
	if err := q.Publish(ctx, "s", queuetest.Entries("good", "", "junk", "good")...); err != nil {
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
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	if len(handled) != 2 || len(malformed) != 2 {
		t.Errorf("handled %v, dropped %v; want 2 good handled, 2 malformed dropped", handled, malformed)
	}
	if got := pendingAfter(t, q, "s", "g"); len(got) != 0 {
		t.Errorf("still pending: %v, want nothing (malformed entries are acknowledged)", got)
	}
}

// ackRecorder is a queue that records every acknowledgement call.
type ackRecorder struct {
	ports.Queue
	mu    sync.Mutex
	calls [][]string
	// notify, when set, is told of each acknowledgement.
	notify chan struct{}
}

func (q *ackRecorder) Ack(ctx context.Context, stream, group string, ids ...string) error {
	q.mu.Lock()
	q.calls = append(q.calls, append([]string(nil), ids...))
	q.mu.Unlock()
	err := q.Queue.Ack(ctx, stream, group, ids...)
	if q.notify != nil {
		q.notify <- struct{}{}
	}
	return err
}

// acked returns the acknowledged ids and the number of calls.
func (q *ackRecorder) acked() (ids map[string]bool, calls int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	ids = map[string]bool{}
	for _, call := range q.calls {
		for _, id := range call {
			ids[id] = true
		}
	}
	return ids, len(q.calls)
}

// TestConsumerBatchesAcknowledgements checks that entries handled one by
// one are acknowledged many per call, that an entry whose handler is still
// running is not acknowledged with the others, and that shutdown
// acknowledges what finished meanwhile, nothing else.
func TestConsumerBatchesAcknowledgements(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	q := &ackRecorder{Queue: memory.NewQueue(memory.QueueOptions{})}
	const quick = 40
	bodies := []string{"slow", "fail"}
	for i := range quick {
		bodies = append(bodies, "ok-"+string(rune('A'+i)))
	}
	if err := q.Publish(ctx, "s", queuetest.Entries(bodies...)...); err != nil {
		t.Fatal(err)
	}
	idOf := map[string]string{} // body → entry id, filled as entries are handled
	var mu sync.Mutex
	release := make(chan struct{})
	c := &application.Consumer{
		Queue: q, Stream: "s", Group: "g", Name: "c1", Batch: 64, Block: 10 * time.Millisecond,
		Concurrency: 64, PerEntry: true, AckDelay: 20 * time.Millisecond,
		Handle: func(_ context.Context, msgs []ports.Message) []string {
			m := msgs[0]
			mu.Lock()
			idOf[m.Body] = m.ID
			mu.Unlock()
			switch m.Body {
			case "fail":
				return nil
			case "slow":
				<-release
			}
			return []string{m.ID}
		},
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()

	deadline := time.Now().Add(5 * time.Second)
	for {
		ids, _ := q.acked()
		if len(ids) == quick {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for the %d quick entries to be acknowledged; %d were", quick, len(ids))
		}
		time.Sleep(time.Millisecond)
	}
	mu.Lock()
	slowID, failID := idOf["slow"], idOf["fail"]
	mu.Unlock()
	ids, calls := q.acked()
	if ids[slowID] || ids[failID] {
		t.Fatalf("acknowledged an entry whose handler is running (%v) or did not finish it (%v)", ids[slowID], ids[failID])
	}
	if calls >= quick/2 {
		t.Errorf("%d entries finished together took %d acknowledgements; want them batched", quick, calls)
	}

	cancel()
	close(release) // slow finishes during shutdown
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	ids, _ = q.acked()
	if !ids[slowID] {
		t.Error("the entry finished during shutdown was not acknowledged before Run returned")
	}
	if ids[failID] || len(ids) != quick+1 {
		t.Errorf("acknowledged %d entries (fail among them: %v), want the %d finished ones", len(ids), ids[failID], quick+1)
	}
	if got := pendingAfter(t, q, "s", "g"); len(got) != 1 || got[0] != "fail" {
		t.Errorf("unacknowledged after shutdown = %v, want [fail]", got)
	}
}

// TestConsumerAcknowledgesLoneEntryAtOnce checks that an entry finished
// after a quiet spell does not wait for company (AckDelay is an hour):
// nothing suggests any is coming.
func TestConsumerAcknowledgesLoneEntryAtOnce(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	q := &ackRecorder{Queue: memory.NewQueue(memory.QueueOptions{}), notify: make(chan struct{}, 1)}
	if err := q.Publish(ctx, "s", queuetest.Entries("a")...); err != nil {
		t.Fatal(err)
	}
	c := &application.Consumer{
		Queue: q, Stream: "s", Group: "g", Name: "c1", Batch: 10, Block: 10 * time.Millisecond,
		AckDelay: time.Hour, PerEntry: true, Concurrency: 4,
		Handle: func(_ context.Context, msgs []ports.Message) []string { return []string{msgs[0].ID} },
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	select {
	case <-q.notify:
	case <-time.After(5 * time.Second):
		t.Fatal("a lone entry waited for company to be acknowledged")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// TestConsumerAcknowledgesFullBatchAtOnce checks that a batch that reaches
// AckBatch goes without waiting for AckDelay.
func TestConsumerAcknowledgesFullBatchAtOnce(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	q := &ackRecorder{Queue: memory.NewQueue(memory.QueueOptions{})}
	if err := q.Publish(ctx, "s", queuetest.Entries("a", "b", "c", "d")...); err != nil {
		t.Fatal(err)
	}
	c := &application.Consumer{
		Queue: q, Stream: "s", Group: "g", Name: "c1", Batch: 10, Block: 10 * time.Millisecond,
		AckDelay: time.Hour, AckBatch: 4,
		Handle: func(_ context.Context, msgs []ports.Message) []string {
			ids := make([]string, len(msgs))
			for i, m := range msgs {
				ids[i] = m.ID
			}
			return ids
		},
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if ids, _ := q.acked(); len(ids) == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("gave up waiting for a full batch to be acknowledged before AckDelay (an hour)")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}
