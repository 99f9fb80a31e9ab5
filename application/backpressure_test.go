package application_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/dispatch-webhooks/dispatch/application"
	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// scriptedLag reports the delivery stream's unread entries from a script,
// its last entry for every call after it, and counts the calls.
type scriptedLag struct {
	mu     sync.Mutex
	unread []int64
	err    error
	calls  int
}

func (l *scriptedLag) Lag(_ context.Context, stream, group string) (ports.GroupLag, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if stream != ports.DeliveryStream || group != application.DeliverGroup {
		return ports.GroupLag{}, errors.New("asked about " + stream + "/" + group)
	}
	l.calls++
	if l.err != nil {
		return ports.GroupLag{}, l.err
	}
	n := l.unread[min(l.calls, len(l.unread))-1]
	// Pending entries are the workers' own: they never hold fan-out back.
	return ports.GroupLag{Unread: n, Pending: 1 << 20}, nil
}

func (l *scriptedLag) called() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.calls
}

func TestFanOutWaitsForTheWorkersToReadTheBacklog(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		maxUnread int64
		unread    []int64
		err       error
		wantCalls int
		wantHeld  bool
	}{
		{"below the bound", 100, []int64{100}, nil, 1, false},
		{"above, then read down", 100, []int64{500, 101, 100}, nil, 3, true},
		{"no bound", 0, []int64{1 << 30}, nil, 0, false},
		{"lag unreadable", 100, nil, errors.New("redis down"), 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := newPipeline()
			p.subscribe(t, "*")
			ev := p.publish(t, "a", "")
			lag := &scriptedLag{unread: tc.unread, err: tc.err}
			p.fanout.Lag, p.fanout.MaxUnread = lag, tc.maxUnread
			var held []time.Duration
			p.fanout.Held = func(d time.Duration) { held = append(held, d) }
			if err := p.fanout.Handle(context.Background(), []string{ev.ID}); err != nil {
				t.Fatal(err)
			}
			// Two polls of 10 ms before the third read finds it read down.
			if tc.wantHeld && (len(held) != 1 || held[0] < 20*time.Millisecond) {
				t.Errorf("held %v, want one wait of at least 20ms", held)
			} else if !tc.wantHeld && len(held) > 0 {
				t.Errorf("held %v, want no wait reported", held)
			}
			if got := len(p.queue.bodies(ports.DeliveryStream)); got != 1 {
				t.Errorf("%d deliveries enqueued, want 1", got)
			}
			if got := lag.called(); got != tc.wantCalls {
				t.Errorf("lag read %d times, want %d", got, tc.wantCalls)
			}
		})
	}
}

// heldBackForever is a pipeline with one event to fan out to one
// subscription while the workers never read the delivery stream down.
func heldBackForever(t *testing.T) (*pipeline, domain.Event, *scriptedLag) {
	t.Helper()
	p := newPipeline()
	p.subscribe(t, "*")
	ev := p.publish(t, "a", "")
	lag := &scriptedLag{unread: []int64{1 << 30}}
	p.fanout.Lag, p.fanout.MaxUnread = lag, 100
	return p, ev, lag
}

func TestFanOutWaitsAtMostASixthOfTheVisibilityTimeout(t *testing.T) {
	t.Parallel()
	p, ev, lag := heldBackForever(t)
	p.fanout.VisibilityTimeout = 600 * time.Millisecond
	var held time.Duration
	p.fanout.Held = func(d time.Duration) { held += d }
	start := time.Now()
	if err := p.fanout.Handle(context.Background(), []string{ev.ID}); err != nil {
		t.Fatal(err)
	}
	if held < 100*time.Millisecond || held > time.Since(start) {
		t.Errorf("held %v reported, want the 100ms it waited", held)
	}
	if waited := time.Since(start); waited < 100*time.Millisecond || waited > 2*time.Second {
		t.Errorf("fanned out after %v, want it to wait 100ms, then go on", waited)
	}
	if got := len(p.queue.bodies(ports.DeliveryStream)); got != 1 {
		t.Errorf("%d deliveries enqueued after the wait, want 1", got)
	}
	if got := lag.called(); got < 2 {
		t.Errorf("lag read %d times, want it polled while waiting", got)
	}
}

func TestFanOutHeldBackStopsWithItsContext(t *testing.T) {
	t.Parallel()
	p, ev, lag := heldBackForever(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.fanout.Handle(ctx, []string{ev.ID}) }()
	for lag.called() < 2 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if got := len(p.queue.bodies(ports.DeliveryStream)); got != 0 {
		t.Errorf("%d deliveries enqueued by a cancelled fan-out, want 0", got)
	}
	if view, _ := p.events.Get(context.Background(), ev.ID, ports.Page{Limit: 100}); len(view.Deliveries) != 0 {
		t.Errorf("%d deliveries stored by a cancelled fan-out, want 0", len(view.Deliveries))
	}
}
