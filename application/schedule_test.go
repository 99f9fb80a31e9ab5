package application_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatch-webhooks/dispatch/application"
	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// backlogStore holds due deliveries and hands them out a scan at a time.
type backlogStore struct {
	ports.EventStore // only UnfannedEvents is used
	mu               sync.Mutex
	due              int
	scans            int
}

func (s *backlogStore) DueDeliveries(_ context.Context, _ time.Time, _ time.Duration, limit int) ([]ports.DueDelivery, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.scans++
	n := min(limit, s.due)
	s.due -= n
	due := make([]ports.DueDelivery, n)
	for i := range due {
		due[i] = ports.DueDelivery{ID: fmt.Sprintf("d%d-%d", s.scans, i), SubscriptionID: "sub_1"}
	}
	return due, nil
}

func (s *backlogStore) UnfannedEvents(context.Context, time.Time, time.Duration, int) ([]string, error) {
	return nil, nil
}

func (s *backlogStore) ExpireIdempotencyKeys(context.Context, time.Time, int) (int, error) {
	return 0, nil
}

// idleStreams has nothing to reclaim or trim.
type idleStreams struct{ *recordingQueue }

func (idleStreams) Reclaim(context.Context, string, string, string, time.Duration, int) ([]ports.Message, error) {
	return nil, nil
}
func (idleStreams) Trim(context.Context, string) error { return nil }

// TestScheduleRunDrainsABacklogWithoutWaitingForItsInterval: 23 due
// deliveries, scans of 5, an interval of an hour, a catch-up pause of a
// millisecond. Run enqueues all of them in five quick scans (5, 5, 5, 5
// and 3), then waits its interval.
func TestScheduleRunDrainsABacklogWithoutWaitingForItsInterval(t *testing.T) {
	t.Parallel()
	store := &backlogStore{due: 23}
	queue := idleStreams{newRecordingQueue()}
	s := &application.Schedule{Events: store, Deliveries: store, Queue: queue, Clock: newClock(), BatchSize: 5, Consumer: "s", CatchUp: time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	ticks := make(chan application.Swept, 100)
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Run(ctx, time.Hour, func(swept application.Swept, err error) {
			if err != nil && ctx.Err() == nil {
				t.Errorf("tick: %v", err)
			}
			ticks <- swept
		})
	}()
	var got []int
	for len(got) < 5 {
		select {
		case swept := <-ticks:
			got = append(got, swept.DueDeliveries)
		case <-time.After(10 * time.Second):
			t.Fatalf("ticks so far %v: Run waited for its interval with a backlog left", got)
		}
	}
	// The fifth scan took less than a batch: Run now waits its hour.
	select {
	case swept := <-ticks:
		t.Errorf("a sixth tick (%+v) without a backlog, before the interval", swept)
	case <-time.After(200 * time.Millisecond):
	}
	cancel()
	<-done
	if want := []int{5, 5, 5, 5, 3}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("deliveries per tick %v, want %v", got, want)
	}
	if n := len(queue.bodies(ports.DeliveryStream)); n != 23 {
		t.Errorf("%d deliveries enqueued, want 23", n)
	}
}

// reclaimingStreams hands out the given entries once, as idle ones to
// reclaim, and records what is appended.
type reclaimingStreams struct {
	*recordingQueue
	idle map[string][]ports.Message
}

func (q reclaimingStreams) Reclaim(_ context.Context, stream, _, _ string, _ time.Duration, _ int) ([]ports.Message, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	msgs := q.idle[stream]
	delete(q.idle, stream)
	return msgs, nil
}
func (reclaimingStreams) Ack(context.Context, string, string, ...string) error { return nil }
func (reclaimingStreams) Trim(context.Context, string) error                   { return nil }

// TestReclaimedDeliveryEntriesAreAppendedPlain: a creator's fresh entry that
// idled past the visibility timeout may still be held by a worker attempting
// its delivery under the reservation, so it comes back as a plain entry,
// whose holder claims. Event entries come back as they were.
func TestReclaimedDeliveryEntriesAreAppendedPlain(t *testing.T) {
	t.Parallel()
	p := newPipeline()
	sub := p.subscribe(t, "a")
	_, id := p.fannedOut(t, sub)
	fresh := p.queue.bodies(ports.DeliveryStream)
	if len(fresh) != 1 {
		t.Fatalf("delivery stream = %v, want the fan-out's entry", fresh)
	}
	queue := reclaimingStreams{newRecordingQueue(), map[string][]ports.Message{
		ports.DeliveryStream: {{ID: "1-0", Body: fresh[0]}, {ID: "1-1", Body: "dlv_plain"}},
		ports.EventStream:    {{ID: "2-0", Body: "evt_x"}},
	}}
	s := &application.Schedule{Events: &backlogStore{}, Deliveries: &backlogStore{}, Queue: queue, Clock: newClock(), Consumer: "s"}
	swept, err := s.Tick(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if swept.ReclaimedDelivs != 2 || swept.ReclaimedEvents != 1 {
		t.Errorf("swept %+v, want 2 deliveries and 1 event reclaimed", swept)
	}
	if got := queue.bodies(ports.DeliveryStream); fmt.Sprint(got) != fmt.Sprint([]string{id, "dlv_plain"}) {
		t.Errorf("delivery entries appended again = %q, want plain ids [%s dlv_plain]", got, id)
	}
	if got := queue.bodies(ports.EventStream); fmt.Sprint(got) != "[evt_x]" {
		t.Errorf("event entries appended again = %q, want [evt_x]", got)
	}
}

// TestScheduleFreesIdempotencyKeysWhenTheirWindowEnds: a key is taken
// within its window; once the window has passed, a tick frees it, and the
// next event with that key is a new one.
func TestScheduleFreesIdempotencyKeysWhenTheirWindowEnds(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	p := newPipeline()
	p.ingest.IdempotencyWindow = time.Hour
	s := &application.Schedule{Events: p.store, Deliveries: p.store, Queue: idleStreams{p.queue}, Clock: p.clock,
		BatchSize: 10, IdempotencyWindow: time.Hour, Consumer: "s"}
	in := domain.NewEventInput{Type: "a", Data: json.RawMessage(`{}`), IdempotencyKey: "export-1"}
	first, err := p.ingest.Publish(ctx, in)
	require.NoError(t, err)

	p.clock.Advance(59 * time.Minute)
	swept, err := s.Tick(ctx)
	require.NoError(t, err)
	assert.Zero(t, swept.ExpiredKeys, "within its window the key stays")

	p.clock.Advance(time.Minute)
	swept, err = s.Tick(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, swept.ExpiredKeys)
	_, err = p.store.GetEvent(ctx, first.Event.ID)
	require.NoError(t, err, "the event stays")

	// An ingest whose window were longer still finds the key free.
	p.ingest.IdempotencyWindow = 24 * time.Hour
	second, err := p.ingest.Publish(ctx, in)
	require.NoError(t, err)
	assert.False(t, second.Replayed)
	assert.NotEqual(t, first.Event.ID, second.Event.ID)
}

// TestScheduleAgesHistoryOut: each tick maintains the history with the
// configured retention; an event with no delivery left to make is gone
// once it is older than the retention.
func TestScheduleAgesHistoryOut(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	p := newPipeline()
	s := &application.Schedule{Events: p.store, Deliveries: p.store, Queue: idleStreams{p.queue}, Clock: p.clock,
		BatchSize: 10, Consumer: "s", History: p.store, Retention: time.Hour}
	published, err := p.ingest.Publish(ctx, domain.NewEventInput{Type: "a", Data: json.RawMessage(`{}`)})
	require.NoError(t, err)
	require.NoError(t, p.fanout.Handle(ctx, []string{published.Event.ID}))

	p.clock.Advance(59 * time.Minute)
	swept, err := s.Tick(ctx)
	require.NoError(t, err)
	assert.Zero(t, swept.History.Dropped, "within the retention it stays")
	_, err = p.store.GetEvent(ctx, published.Event.ID)
	require.NoError(t, err)

	p.clock.Advance(2 * time.Minute)
	swept, err = s.Tick(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, swept.History.Dropped)
	_, err = p.store.GetEvent(ctx, published.Event.ID)
	assert.ErrorIs(t, err, domain.ErrNotFound)
}

// failingHistory fails every maintenance.
type failingHistory struct{ ports.Retention }

func (failingHistory) MaintainHistory(context.Context, time.Time, time.Duration) (ports.Maintenance, error) {
	return ports.Maintenance{}, errors.New("lock table: boom")
}

func TestScheduleReportsAFailedMaintenanceAndGoesOn(t *testing.T) {
	t.Parallel()
	p := newPipeline()
	s := &application.Schedule{Events: p.store, Deliveries: p.store, Queue: idleStreams{p.queue}, Clock: p.clock,
		BatchSize: 10, Consumer: "s", History: failingHistory{}}
	_, err := s.Tick(t.Context())
	assert.ErrorContains(t, err, "maintain history: lock table: boom")
}

// countingHistory counts maintenances.
type countingHistory struct {
	ports.Retention
	calls int
}

func (h *countingHistory) MaintainHistory(context.Context, time.Time, time.Duration) (ports.Maintenance, error) {
	h.calls++
	return ports.Maintenance{}, nil
}

// TestScheduleMaintainsHistoryAtMostEveryInterval: ticks in quick
// succession (catching up on a backlog) maintain the history once.
func TestScheduleMaintainsHistoryAtMostEveryInterval(t *testing.T) {
	t.Parallel()
	p := newPipeline()
	history := &countingHistory{}
	s := &application.Schedule{Events: p.store, Deliveries: p.store, Queue: idleStreams{p.queue}, Clock: p.clock,
		BatchSize: 10, Consumer: "s", History: history}
	for range 3 {
		_, err := s.Tick(t.Context())
		require.NoError(t, err)
		p.clock.Advance(time.Second)
	}
	assert.Equal(t, 1, history.calls, "once in the first 3 s")
	p.clock.Advance(application.DefaultHistoryInterval)
	_, err := s.Tick(t.Context())
	require.NoError(t, err)
	assert.Equal(t, 2, history.calls, "again once the interval passed")
}

// countingStreams counts the scheduler's reclaims and trims, and hands
// out the entries queued in idle to the next reclaim of their stream.
type countingStreams struct {
	reclaimingStreams
	reclaims, trims int
}

func (q *countingStreams) Reclaim(ctx context.Context, stream, group, consumer string, idle time.Duration, limit int) ([]ports.Message, error) {
	q.mu.Lock()
	q.reclaims++
	q.mu.Unlock()
	return q.reclaimingStreams.Reclaim(ctx, stream, group, consumer, idle, limit)
}

func (q *countingStreams) Trim(context.Context, string) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.trims++
	return nil
}

// TestScheduleReclaimsAndTrimsAtMostEveryTenthOfTheVisibilityTimeout: an
// idle scheduler ticking every second reclaims and trims once per 3 s
// (the default 30 s visibility timeout), but a reclaim that took a whole
// batch is followed at the next tick, as a backlog needs.
func TestScheduleReclaimsAndTrimsAtMostEveryTenthOfTheVisibilityTimeout(t *testing.T) {
	t.Parallel()
	clock := newClock()
	queue := &countingStreams{reclaimingStreams: reclaimingStreams{newRecordingQueue(), map[string][]ports.Message{}}}
	s := &application.Schedule{Events: &backlogStore{}, Deliveries: &backlogStore{}, Queue: queue, Clock: clock,
		BatchSize: 2, Consumer: "s"}
	tick := func() application.Swept {
		t.Helper()
		swept, err := s.Tick(t.Context())
		require.NoError(t, err)
		clock.Advance(time.Second)
		return swept
	}
	calls := func() [2]int {
		queue.mu.Lock()
		defer queue.mu.Unlock()
		return [2]int{queue.reclaims, queue.trims}
	}
	tick()
	assert.Equal(t, [2]int{2, 2}, calls(), "the first tick reclaims and trims both streams")
	tick()
	tick()
	assert.Equal(t, [2]int{2, 2}, calls(), "not again within 3 s")

	queue.mu.Lock()
	queue.idle[ports.DeliveryStream] = []ports.Message{{ID: "1-0", Body: "dlv_1"}, {ID: "1-1", Body: "dlv_2"}}
	queue.mu.Unlock()
	swept := tick()
	assert.Equal(t, 2, swept.ReclaimedDelivs)
	assert.Equal(t, [2]int{4, 4}, calls(), "again once 3 s passed")
	tick()
	assert.Equal(t, [2]int{6, 6}, calls(), "a whole batch reclaimed: again at the next tick")
	tick()
	assert.Equal(t, [2]int{6, 6}, calls(), "nothing more came: back to once per 3 s")
}
