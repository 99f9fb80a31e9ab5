package bootstrap_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/dispatch-webhooks/dispatch/adapters/memory"
	"github.com/dispatch-webhooks/dispatch/adapters/postgres"
	"github.com/dispatch-webhooks/dispatch/adapters/postgres/pgtest"
	"github.com/dispatch-webhooks/dispatch/application"
	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

type fixedClock time.Time

func (c fixedClock) Now() time.Time { return time.Time(c) }

// publishLog is a queue that records what is published to the delivery
// stream.
type publishLog struct {
	ports.Queue
	mu  sync.Mutex
	ids []string
}

func (q *publishLog) Publish(ctx context.Context, stream string, entries ...ports.Entry) error {
	if stream == ports.DeliveryStream {
		q.mu.Lock()
		for _, e := range entries {
			q.ids = append(q.ids, e.Body)
		}
		q.mu.Unlock()
	}
	return q.Queue.Publish(ctx, stream, entries...)
}

// TestTwoSchedulersNeverEnqueueTheSameDeliveryInOneCycle runs two
// schedulers' scans at the same moment over 300 due deliveries in
// PostgreSQL: each delivery is enqueued exactly once.
func TestTwoSchedulersNeverEnqueueTheSameDeliveryInOneCycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := postgres.New(pgtest.NewPool(t))
	created := time.Now().UTC()
	sub, err := domain.NewSubscription(domain.NewSubscriptionInput{URL: "https://example.com/h", EventTypes: []string{"*"}}, created)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.CreateSubscription(ctx, sub); err != nil {
		t.Fatal(err)
	}
	const n = 300
	var fanouts []ports.FanOut
	for range n {
		ev, err := domain.NewEvent(domain.NewEventInput{Type: "a", Data: json.RawMessage(`{}`)}, created)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := store.CreateEvent(ctx, ev, created.Add(-time.Hour)); err != nil {
			t.Fatal(err)
		}
		fanouts = append(fanouts, ports.FanOut{EventID: ev.ID, Deliveries: []domain.Delivery{domain.NewDelivery(ev, sub, created)}})
	}
	if _, err := store.CreateDeliveries(ctx, fanouts); err != nil {
		t.Fatal(err)
	}

	// An hour later every delivery is due and its enqueue mark is stale, as
	// if every append had been lost.
	log := &publishLog{Queue: memory.NewQueue(memory.QueueOptions{})}
	later := fixedClock(created.Add(time.Hour))
	schedulers := []*application.Schedule{
		{Events: store, Deliveries: store, Queue: log, Clock: later, BatchSize: 50, VisibilityTimeout: time.Minute, Consumer: "s1"},
		{Events: store, Deliveries: store, Queue: log, Clock: later, BatchSize: 50, VisibilityTimeout: time.Minute, Consumer: "s2"},
	}
	// Both replicas poll until the backlog is gone, at the same moment.
	var wg sync.WaitGroup
	for _, s := range schedulers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range n {
				swept, err := s.Tick(ctx)
				if err != nil {
					t.Errorf("tick: %v", err)
					return
				}
				if swept.DueDeliveries == 0 {
					return
				}
			}
		}()
	}
	wg.Wait()

	seen := map[string]int{}
	for _, id := range log.ids {
		seen[id]++
	}
	for id, times := range seen {
		if times > 1 {
			t.Errorf("delivery %s enqueued %d times within one cycle", id, times)
		}
	}
	if len(seen) != n {
		t.Errorf("%d deliveries enqueued, want all %d", len(seen), n)
	}
}
