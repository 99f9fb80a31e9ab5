package batch_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/dispatch-webhooks/dispatch/internal/batch"
)

// TestMain checks that no test leaves a goroutine behind: the batcher has
// none of its own, and a caller that gave up must not strand one.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// waitFor bounds every wait; generous for a loaded CI machine.
const waitFor = 10 * time.Second

// recorder is a WriteFunc that records its batches. While gate is set, each
// write announces itself on started and waits for gate before returning.
type recorder struct {
	mu      sync.Mutex
	batches [][]int
	ctxs    []context.Context
	fail    func(item int) error

	started chan struct{}
	gate    chan struct{}
}

func newRecorder() *recorder { return &recorder{started: make(chan struct{}, 100)} }

func (r *recorder) write(ctx context.Context, items []int, errs []error) {
	r.mu.Lock()
	r.batches = append(r.batches, slices.Clone(items))
	r.ctxs = append(r.ctxs, ctx)
	gate, fail := r.gate, r.fail
	r.mu.Unlock()
	if gate != nil {
		r.started <- struct{}{}
		<-gate
	}
	for i, item := range items {
		if fail != nil {
			errs[i] = fail(item)
		}
	}
}

func (r *recorder) hold() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gate = make(chan struct{})
}

func (r *recorder) release() {
	r.mu.Lock()
	defer r.mu.Unlock()
	close(r.gate)
	r.gate = nil
}

func (r *recorder) snapshot() [][]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.batches)
}

// waitStarted waits until a write has started (with the gate held).
func (r *recorder) waitStarted(t *testing.T, what string) {
	t.Helper()
	select {
	case <-r.started:
	case <-time.After(waitFor):
		t.Fatalf("waited %s for a write to start: %s", waitFor, what)
	}
}

// outcome is what one Commit returned.
type outcome struct {
	item int
	err  error
}

// commitAsync calls Commit on a goroutine of its own and sends the outcome
// to out.
func commitAsync(ctx context.Context, b *batch.Batcher[int], item int, out chan<- outcome) {
	go func() { out <- outcome{item, b.Commit(ctx, item)} }()
}

func receive(t *testing.T, out <-chan outcome, what string) outcome {
	t.Helper()
	select {
	case o := <-out:
		return o
	case <-time.After(waitFor):
		t.Fatalf("waited %s for %s", waitFor, what)
		return outcome{}
	}
}

// eventually polls cond until it holds, failing with what after waitFor.
func eventually(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", waitFor, what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestConcurrentCommitsAreAllWrittenOnce(t *testing.T) {
	t.Parallel()
	r := newRecorder()
	b := batch.New(r.write, batch.Limits[int]{MaxItems: 16})
	const callers, each = 64, 50
	var wg sync.WaitGroup
	errs := make(chan error, callers*each)
	for c := range callers {
		wg.Go(func() {
			for i := range each {
				if err := b.Commit(t.Context(), c*each+i); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	var written []int
	maxBatch := 0
	for _, batch := range r.snapshot() {
		written = append(written, batch...)
		maxBatch = max(maxBatch, len(batch))
		assert.LessOrEqual(t, len(batch), 16, "MaxItems caps a batch")
	}
	slices.Sort(written)
	want := make([]int, callers*each)
	for i := range want {
		want[i] = i
	}
	assert.Equal(t, want, written, "every item is written exactly once")
	t.Logf("%d items in %d batches, largest %d", len(written), len(r.snapshot()), maxBatch)
}

// TestCallersArrivingDuringAWriteShareTheNext checks the group commit itself
// and the hand-over: callers that arrive while a batch is written form the
// next batch, written by one of them; the first leader writes only its own.
func TestCallersArrivingDuringAWriteShareTheNext(t *testing.T) {
	t.Parallel()
	r := newRecorder()
	r.hold()
	b := batch.New(r.write, batch.Limits[int]{})
	out := make(chan outcome, 10)
	commitAsync(t.Context(), b, 0, out)
	r.waitStarted(t, "the first caller leads a batch of its own")
	for i := 1; i <= 5; i++ {
		commitAsync(t.Context(), b, i, out)
		// One at a time, so the arrival order is known.
		eventually(t, func() bool { return b.Waiting() == i }, "the caller to queue behind the write")
	}
	r.mu.Lock()
	first := r.gate
	r.gate = make(chan struct{})
	r.mu.Unlock()
	close(first)
	o := receive(t, out, "the first leader to return after its own batch")
	assert.Equal(t, outcome{0, nil}, o, "the first leader returns once its batch is written, without writing the next")
	r.waitStarted(t, "a waiting caller leads the next batch")
	r.release()
	got := []int{}
	for range 5 {
		o := receive(t, out, "the second batch's callers")
		require.NoError(t, o.err)
		got = append(got, o.item)
	}
	assert.ElementsMatch(t, []int{1, 2, 3, 4, 5}, got)
	assert.Equal(t, [][]int{{0}, {1, 2, 3, 4, 5}}, r.snapshot(), "callers that arrived during a write share the next batch, in arrival order")
}

// clock is a batcher's clock that moves only when told.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Unix(1_700_000_000, 0)} }

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestLingerWaitsForCompanyOnlyWhenItIsComing checks the linger's two
// sides: the first call, with no rate known, goes at once however long
// Linger is; the next, half a second later, makes the rate one call per
// half second, so its leader waits for the four that would fill its batch
// (up to 2 s, and as long for each), and the wait ends as soon as they
// have come, not when it runs out.
func TestLingerWaitsForCompanyOnlyWhenItIsComing(t *testing.T) {
	t.Parallel()
	r := newRecorder()
	clock := newClock()
	b := batch.New(r.write, batch.Limits[int]{Linger: time.Hour, MaxItems: 5, Now: clock.now})
	require.NoError(t, b.Commit(t.Context(), 0), "the first call goes at once")
	require.Equal(t, [][]int{{0}}, r.snapshot())
	clock.advance(500 * time.Millisecond) // the gap the rate is estimated from

	out := make(chan outcome, 10)
	start := time.Now()
	commitAsync(t.Context(), b, 1, out)
	eventually(t, func() bool { return b.Waiting() == 1 }, "the next caller to lead")
	for i := 2; i <= 5; i++ {
		commitAsync(t.Context(), b, i, out)
	}
	for range 5 {
		require.NoError(t, receive(t, out, "every caller").err)
	}
	assert.Less(t, time.Since(start), 1500*time.Millisecond, "the wait ended when the batch filled")
	batches := r.snapshot()
	require.Len(t, batches, 2, "callers arriving while the leader lingers share its batch: %v", batches)
	assert.Equal(t, 1, batches[1][0], "the leader's item comes first")
	assert.ElementsMatch(t, []int{1, 2, 3, 4, 5}, batches[1])
}

// TestUrgentItemEndsTheLinger lingers for an hour's company at a rate
// that promises plenty, with arrivals 0.9 s apart on the batcher's clock,
// so that a leader without company would wait out its patience (four
// gaps: 3.6 s) before it goes: an urgent leader goes at once, and an
// urgent item that arrives ends a wait under way and joins its batch.
func TestUrgentItemEndsTheLinger(t *testing.T) {
	t.Parallel()
	r := newRecorder()
	clock := newClock()
	urgent := func(item int) bool { return item < 0 }
	b := batch.New(r.write, batch.Limits[int]{Linger: time.Hour, MaxItems: 100, Now: clock.now, Urgent: urgent})
	start := time.Now()
	require.NoError(t, b.Commit(t.Context(), 0), "the first call goes at once")
	clock.advance(900 * time.Millisecond)
	require.NoError(t, b.Commit(t.Context(), -1), "an urgent leader goes at once")
	clock.advance(900 * time.Millisecond)

	out := make(chan outcome, 10)
	commitAsync(t.Context(), b, 2, out)
	eventually(t, func() bool { return b.Waiting() == 1 }, "the next caller to lead and linger")
	commitAsync(t.Context(), b, -3, out)
	for range 2 {
		require.NoError(t, receive(t, out, "the lingering leader and the urgent caller").err)
	}
	assert.Less(t, time.Since(start), 2*time.Second, "a leader waited out its patience with an urgent item pending")
	assert.Equal(t, [][]int{{0}, {-1}, {2, -3}}, r.snapshot())
}

// TestLingerGivesUpWhenCompanyStops runs callers in a closed loop, each
// committing again only once its last commit returned, against a write
// that takes a millisecond of the batcher's clock: whatever the rate, no
// caller is left to join a
// lingering batch, and the linger's patience (a few gaps between arrivals)
// ends each wait. Without it every batch would wait for the company the
// rate promises, about a tenth of a second here (Linger is an hour), and
// the rounds below would take seconds.
func TestLingerGivesUpWhenCompanyStops(t *testing.T) {
	t.Parallel()
	clock := newClock()
	b := batch.New(func(_ context.Context, items []int, _ []error) {
		clock.advance(time.Millisecond)
	}, batch.Limits[int]{Linger: time.Hour, Now: clock.now})
	const callers, rounds = 4, 50
	start := time.Now()
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			for range rounds {
				assert.NoError(t, b.Commit(t.Context(), i))
			}
		})
	}
	wg.Wait()
	assert.Less(t, time.Since(start), 3*time.Second, "batches waited for company that could not come")
}

// TestLeaderLetsRunnableCallersJoin starts callers the way a consumer
// hands out a read's entries, all at once, on one processor so that the
// order they run in is the scheduler's, not chance's. The first to run
// leads, but yields before it takes its batch: the others, already
// runnable, queue meanwhile and share it. Without the yield the leader
// writes its own item alone, and so does each caller after it: 16
// batches.
//
// Not parallel: it sets GOMAXPROCS for the process while it runs.
func TestLeaderLetsRunnableCallersJoin(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	r := newRecorder()
	b := batch.New(r.write, batch.Limits[int]{})
	const callers = 16
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() { assert.NoError(t, b.Commit(t.Context(), i)) })
	}
	wg.Wait()
	batches := r.snapshot()
	// One batch, unless the scheduler's fairness check (the global run
	// queue first, every 61st turn) gives the leader its turn back early:
	// then what queued by then, and the rest in the next.
	assert.LessOrEqual(t, len(batches), 3, "callers runnable when the leader started share its batch: %v", batches)
}

func TestEachCallerGetsItsOwnOutcome(t *testing.T) {
	t.Parallel()
	r := newRecorder()
	r.fail = func(item int) error {
		if item%3 == 0 {
			return fmt.Errorf("item %d refused", item)
		}
		return nil
	}
	b := batch.New(r.write, batch.Limits[int]{})
	var wg sync.WaitGroup
	for i := range 60 {
		wg.Go(func() {
			err := b.Commit(t.Context(), i)
			if i%3 == 0 {
				assert.EqualError(t, err, fmt.Sprintf("item %d refused", i))
			} else {
				assert.NoError(t, err, "item %d", i)
			}
		})
	}
	wg.Wait()
}

func TestLimitsCapABatch(t *testing.T) {
	t.Parallel()
	r := newRecorder()
	r.hold()
	// Weights are the items themselves: 4+4 fits 10, a third 4 does not;
	// 20 alone is over the limit but still goes, on its own.
	b := batch.New(r.write, batch.Limits[int]{MaxItems: 3, MaxWeight: 10, Weigh: func(i int) int { return i }})
	out := make(chan outcome, 10)
	commitAsync(t.Context(), b, 1, out)
	r.waitStarted(t, "the first batch")
	items := []int{4, 4, 4, 20, 1, 1, 1, 1}
	for i, item := range items {
		commitAsync(t.Context(), b, item, out)
		// One at a time: the arrival order is what the batches follow.
		eventually(t, func() bool { return b.Waiting() == i+1 }, "the caller to queue")
	}
	r.release()
	for range 1 + len(items) {
		require.NoError(t, receive(t, out, "every caller").err)
	}
	assert.Equal(t, [][]int{{1}, {4, 4}, {4}, {20}, {1, 1, 1}, {1}}, r.snapshot())
}

func TestCancelWhileQueuedReturnsAndDropsTheItem(t *testing.T) {
	t.Parallel()
	r := newRecorder()
	r.hold()
	b := batch.New(r.write, batch.Limits[int]{})
	out := make(chan outcome, 10)
	commitAsync(t.Context(), b, 0, out)
	r.waitStarted(t, "the first batch")

	ctx, cancel := context.WithCancel(t.Context())
	commitAsync(ctx, b, 1, out)
	commitAsync(t.Context(), b, 2, out)
	eventually(t, func() bool { return b.Waiting() == 2 }, "two callers to queue behind the write")
	cancel()
	o := receive(t, out, "the cancelled caller to return while the write is still held")
	assert.Equal(t, 1, o.item)
	assert.ErrorIs(t, o.err, context.Canceled)

	r.release()
	assert.NoError(t, receive(t, out, "the rest").err)
	assert.NoError(t, receive(t, out, "the rest").err)
	assert.Equal(t, [][]int{{0}, {2}}, r.snapshot(), "a caller that gave up before its batch was taken is never written")
}

func TestCancelWhileWrittenReturnsAndTheWriteGoesOn(t *testing.T) {
	t.Parallel()
	r := newRecorder()
	r.hold()
	b := batch.New(r.write, batch.Limits[int]{})
	out := make(chan outcome, 10)
	commitAsync(t.Context(), b, 0, out)
	r.waitStarted(t, "the first batch")

	ctxA, cancelA := context.WithCancel(t.Context())
	defer cancelA()
	ctxB, cancelB := context.WithCancel(t.Context())
	defer cancelB()
	commitAsync(ctxA, b, 1, out)
	commitAsync(ctxB, b, 2, out)
	eventually(t, func() bool { return b.Waiting() == 2 }, "two callers to queue")
	r.mu.Lock()
	first := r.gate
	r.gate = make(chan struct{})
	r.mu.Unlock()
	close(first)
	require.NoError(t, receive(t, out, "the first leader").err)
	r.waitStarted(t, "the batch of 1 and 2")

	// Which of the two leads is up to the scheduler; the follower returns
	// at once, the leader only when the write ends.
	cancelA()
	cancelB()
	o := receive(t, out, "the cancelled follower to return while its batch is written")
	assert.ErrorIs(t, o.err, context.Canceled)
	r.mu.Lock()
	writeCtx := r.ctxs[1]
	r.mu.Unlock()
	select {
	case <-writeCtx.Done():
	case <-time.After(waitFor):
		t.Fatal("the write's ctx should end once every caller in the batch gave up")
	}
	r.release()
	o = receive(t, out, "the leader to return when the write ends")
	assert.NoError(t, o.err, "the write succeeded: the leader reports it")
}

func TestWriteContextLivesWhileSomeoneWaits(t *testing.T) {
	t.Parallel()
	r := newRecorder()
	r.hold()
	b := batch.New(r.write, batch.Limits[int]{})
	leaderCtx, cancelLeader := context.WithCancel(t.Context())
	out := make(chan outcome, 10)
	commitAsync(leaderCtx, b, 0, out)
	r.waitStarted(t, "the leader's batch")
	cancelLeader()
	r.mu.Lock()
	writeCtx := r.ctxs[0]
	r.mu.Unlock()
	select {
	case <-writeCtx.Done():
	case <-time.After(waitFor):
		t.Fatal("with its only caller gone, the write's ctx should end")
	}
	r.release()
	assert.NoError(t, receive(t, out, "the leader").err)

	// A batch whose leader gives up while another caller waits keeps going,
	// also when that caller's ctx is one that never ends.
	r.hold()
	ctx, cancel := context.WithCancel(t.Context())
	commitAsync(t.Context(), b, 1, out)
	r.waitStarted(t, "a blocker batch")
	commitAsync(ctx, b, 2, out)
	commitAsync(context.WithoutCancel(t.Context()), b, 3, out)
	eventually(t, func() bool { return b.Waiting() == 2 }, "two callers to queue")
	r.mu.Lock()
	first := r.gate
	r.gate = make(chan struct{})
	r.mu.Unlock()
	close(first)
	require.NoError(t, receive(t, out, "the blocker").err)
	r.waitStarted(t, "the batch of 2 and 3")
	cancel()
	r.mu.Lock()
	writeCtx = r.ctxs[2]
	r.mu.Unlock()
	assert.Never(t, func() bool { return writeCtx.Err() != nil }, 50*time.Millisecond, 5*time.Millisecond,
		"one caller still waits: the write must not be cancelled")
	r.release()
	for range 2 {
		o := receive(t, out, "the batch of 2 and 3")
		if o.item == 3 {
			assert.NoError(t, o.err)
		}
	}
}

func TestPanickingWriteFailsItsBatchAndLeavesTheBatcherUsable(t *testing.T) {
	t.Parallel()
	r := newRecorder()
	r.hold()
	panicky := true
	b := batch.New(func(ctx context.Context, items []int, errs []error) {
		r.write(ctx, items, errs)
		if panicky && slices.Contains(items, 2) {
			panic("boom")
		}
	}, batch.Limits[int]{})
	out := make(chan outcome, 10)
	commitAsync(t.Context(), b, 0, out)
	r.waitStarted(t, "the first batch")
	panicked := make(chan any, 2)
	for _, item := range []int{1, 2} {
		go func() {
			defer func() { panicked <- recover() }()
			out <- outcome{item, b.Commit(t.Context(), item)}
		}()
	}
	eventually(t, func() bool { return b.Waiting() == 2 }, "two callers to queue")
	r.release()
	require.NoError(t, receive(t, out, "the first").err)
	o := receive(t, out, "the follower of the batch that panicked")
	assert.ErrorIs(t, o.err, batch.ErrWritePanicked)
	select {
	case p := <-panicked:
		if p == nil {
			p = <-panicked
		}
		assert.Equal(t, "boom", p, "the panic goes on in the leader")
	case <-time.After(waitFor):
		t.Fatal("waited for the leader's panic")
	}
	panicky = false
	assert.NoError(t, b.Commit(t.Context(), 3), "the batcher still works after a panic")
}

func TestCommitWithDoneContextWritesNothing(t *testing.T) {
	t.Parallel()
	r := newRecorder()
	b := batch.New(r.write, batch.Limits[int]{})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	assert.ErrorIs(t, b.Commit(ctx, 1), context.Canceled)
	assert.Empty(t, r.snapshot())
}

func TestWholeBatchError(t *testing.T) {
	t.Parallel()
	broken := errors.New("connection reset")
	b := batch.New(func(_ context.Context, items []int, errs []error) {
		for i := range errs {
			errs[i] = broken
		}
	}, batch.Limits[int]{})
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() { assert.ErrorIs(t, b.Commit(t.Context(), i), broken) })
	}
	wg.Wait()
}

// TestWritersWriteBatchesAtOnce checks Limits.Writers: a second batch is
// written while the first is still held, and callers arriving while every
// writer is busy wait, then go in at most one batch per freed writer.
func TestWritersWriteBatchesAtOnce(t *testing.T) {
	t.Parallel()
	r := newRecorder()
	r.hold()
	b := batch.New(r.write, batch.Limits[int]{Writers: 2})
	out := make(chan outcome, 10)
	commitAsync(t.Context(), b, 0, out)
	r.waitStarted(t, "the first caller leads a batch of its own")
	commitAsync(t.Context(), b, 1, out)
	r.waitStarted(t, "the second caller leads a second batch while the first is held")
	for i := 2; i <= 4; i++ {
		commitAsync(t.Context(), b, i, out)
		eventually(t, func() bool { return b.Waiting() == i-1 }, "the caller to queue: both writers are busy")
	}
	r.release()
	got := []int{}
	for range 5 {
		o := receive(t, out, "every caller")
		require.NoError(t, o.err)
		got = append(got, o.item)
	}
	assert.ElementsMatch(t, []int{0, 1, 2, 3, 4}, got)
	batches := r.snapshot()
	require.GreaterOrEqual(t, len(batches), 3)
	assert.ElementsMatch(t, [][]int{{0}, {1}}, batches[:2], "one batch per writer")
	assert.LessOrEqual(t, len(batches), 4, "the callers queued behind them fill at most one batch per writer")
	var rest []int
	for _, batch := range batches[2:] {
		rest = append(rest, batch...)
	}
	assert.ElementsMatch(t, []int{2, 3, 4}, rest)
}

func TestConcurrentCommitsWithWritersAreAllWrittenOnce(t *testing.T) {
	t.Parallel()
	r := newRecorder()
	var inFlight, most atomic.Int64
	b := batch.New(func(ctx context.Context, items []int, errs []error) {
		n := inFlight.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(50 * time.Microsecond)
		r.write(ctx, items, errs)
		inFlight.Add(-1)
	}, batch.Limits[int]{MaxItems: 16, Writers: 3})
	const callers, each = 64, 50
	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			for i := range each {
				assert.NoError(t, b.Commit(t.Context(), c*each+i))
			}
		})
	}
	wg.Wait()
	var written []int
	for _, batch := range r.snapshot() {
		written = append(written, batch...)
		assert.LessOrEqual(t, len(batch), 16, "MaxItems caps a batch")
	}
	slices.Sort(written)
	want := make([]int, callers*each)
	for i := range want {
		want[i] = i
	}
	assert.Equal(t, want, written, "every item is written exactly once")
	assert.LessOrEqual(t, most.Load(), int64(3), "no more batches in flight than Writers")
	assert.Zero(t, b.Waiting())
}
