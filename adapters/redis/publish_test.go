package redis

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatch-webhooks/dispatch/adapters/redis/redistest"
	"github.com/dispatch-webhooks/dispatch/ports"
	"github.com/dispatch-webhooks/dispatch/ports/queuetest"
)

// Tests of Publish's group commit. A client hook holds every XADD at a gate,
// so a pipeline is stuck on its way to Redis while callers line up behind
// it: which calls share a pipeline is then known, not left to the
// scheduler.

// waitFor bounds every wait; generous for a loaded CI machine.
const waitFor = 10 * time.Second

// xaddGate is a go-redis hook that, while held, stops every command or
// pipeline with an XADD before it is sent, and records what was sent.
type xaddGate struct {
	mu        sync.Mutex
	gate      chan struct{}
	stuck     chan struct{}
	pipelines [][]string // the bodies of each round trip with XADDs
}

func newXaddGate() *xaddGate { return &xaddGate{stuck: make(chan struct{}, 100)} }

func (g *xaddGate) hold() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.gate = make(chan struct{})
}

func (g *xaddGate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gate != nil {
		close(g.gate)
		g.gate = nil
	}
}

func (g *xaddGate) pass(cmds []goredis.Cmder) {
	var bodies []string
	for _, c := range cmds {
		if c.Name() == "xadd" {
			args := c.Args()
			bodies = append(bodies, fmt.Sprint(args[len(args)-1]))
		}
	}
	if len(bodies) == 0 {
		return
	}
	g.mu.Lock()
	g.pipelines = append(g.pipelines, bodies)
	gate := g.gate
	g.mu.Unlock()
	if gate != nil {
		g.stuck <- struct{}{}
		<-gate
	}
}

func (g *xaddGate) sent() [][]string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([][]string(nil), g.pipelines...)
}

func (g *xaddGate) waitStuck(t *testing.T) {
	t.Helper()
	select {
	case <-g.stuck:
	case <-time.After(waitFor):
		t.Fatalf("waited %s for an XADD round trip to reach the gate", waitFor)
	}
}

func (g *xaddGate) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (g *xaddGate) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		g.pass([]goredis.Cmder{cmd})
		return next(ctx, cmd)
	}
}

func (g *xaddGate) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		g.pass(cmds)
		return next(ctx, cmds)
	}
}

// gatedQueue is a Queue on the real Redis whose XADDs pass g.
func gatedQueue(t *testing.T) (*Queue, *xaddGate) {
	t.Helper()
	client := redistest.Client(t)
	g := newXaddGate()
	client.AddHook(g)
	t.Cleanup(g.release)
	opts := DefaultQueueOptions()
	opts.Prefix = redistest.Prefix(t)
	return newTestQueue(t, client, opts), g
}

// publishAsync calls Publish on a goroutine of its own.
func publishAsync(ctx context.Context, q *Queue, bodies ...string) <-chan error {
	out := make(chan error, 1)
	go func() { out <- q.Publish(ctx, ports.EventStream, queuetest.Entries(bodies...)...) }()
	return out
}

// lineUp starts Publish for each call, one at a time so that they wait in
// this order behind the stuck round trip.
func lineUp(t *testing.T, ctx context.Context, q *Queue, calls ...[]string) []<-chan error {
	t.Helper()
	b := q.publisher(ports.EventStream)
	outs := make([]<-chan error, len(calls))
	for i, bodies := range calls {
		before := b.Waiting()
		outs[i] = publishAsync(ctx, q, bodies...)
		require.Eventually(t, func() bool { return b.Waiting() == before+1 }, waitFor, time.Millisecond,
			"call %d to line up behind the stuck round trip", i)
	}
	return outs
}

func receiveErr(t *testing.T, out <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-out:
		return err
	case <-time.After(waitFor):
		t.Fatalf("waited %s for %s", waitFor, what)
		return nil
	}
}

func TestConcurrentPublishesShareOnePipeline(t *testing.T) {
	t.Parallel()
	q, g := gatedQueue(t)
	g.hold()
	first := publishAsync(t.Context(), q, "first")
	g.waitStuck(t)
	outs := lineUp(t, t.Context(), q, []string{"a1", "a2"}, []string{"b"}, []string{"c1", "c2", "c3"})
	g.release()
	require.NoError(t, receiveErr(t, first, "the first call"))
	for i, out := range outs {
		require.NoError(t, receiveErr(t, out, fmt.Sprintf("call %d", i)))
	}
	assert.Equal(t, [][]string{{"first"}, {"a1", "a2", "b", "c1", "c2", "c3"}}, g.sent(),
		"calls that came during a round trip share the next one, in arrival order")
	got := readAllBodies(t, q, 7)
	assert.Equal(t, []string{"first", "a1", "a2", "b", "c1", "c2", "c3"}, got)
}

func TestPublishCancelledWhileWaitingAppendsNothing(t *testing.T) {
	t.Parallel()
	q, g := gatedQueue(t)
	g.hold()
	first := publishAsync(t.Context(), q, "first")
	g.waitStuck(t)
	ctx, cancel := context.WithCancel(t.Context())
	dropped := lineUp(t, ctx, q, []string{"dropped"})[0]
	kept := lineUp(t, t.Context(), q, []string{"kept"})[0]
	cancel()
	cancelled := time.Now()
	assert.ErrorIs(t, receiveErr(t, dropped, "the cancelled call"), context.Canceled)
	assert.Less(t, time.Since(cancelled), time.Second, "returns without waiting for the stuck round trip")
	g.release()
	require.NoError(t, receiveErr(t, first, "the first call"))
	require.NoError(t, receiveErr(t, kept, "the call behind it"))
	assert.Equal(t, []string{"first", "kept"}, readAllBodies(t, q, 2))
	assert.Equal(t, [][]string{{"first"}, {"kept"}}, g.sent(), "the cancelled call never reached Redis")
}

func TestFailedPipelineFailsEveryCallInIt(t *testing.T) {
	t.Parallel()
	q, g := gatedQueue(t)
	g.hold()
	first := publishAsync(t.Context(), q, "first")
	g.waitStuck(t)
	outs := lineUp(t, t.Context(), q, []string{"a"}, []string{"b1", "b2"}, []string{"c"})
	// While the round trips wait, the stream's key becomes a string: every
	// XADD fails with WRONGTYPE.
	require.NoError(t, q.client.Set(t.Context(), q.keylessKey(ports.EventStream), "not a stream", 0).Err())
	g.release()
	for i, out := range append([]<-chan error{first}, outs...) {
		err := receiveErr(t, out, fmt.Sprintf("call %d", i))
		require.Error(t, err, "call %d", i)
		assert.Contains(t, err.Error(), "WRONGTYPE", "call %d gets its own XADD's error", i)
	}
	assert.Equal(t, [][]string{{"first"}, {"a", "b1", "b2", "c"}}, g.sent(), "the three shared one pipeline")
}

func TestPublishAfterTheConnectionBreaks(t *testing.T) {
	t.Parallel()
	// A Redis that goes away: every call of the pipeline gets the error,
	// and none waits forever.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	require.NoError(t, ln.Close())
	client := goredis.NewClient(&goredis.Options{Addr: ln.Addr().String(), MaxRetries: -1, DialerRetries: 1, DialerRetryTimeout: time.Millisecond})
	t.Cleanup(func() { _ = client.Close() })
	q := newTestQueue(t, client, QueueOptions{})
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			err := q.Publish(t.Context(), ports.EventStream, queuetest.Entries(fmt.Sprint(i))...)
			assert.Error(t, err, "call %d", i)
		})
	}
	wg.Wait()
}

// readAllBodies reads n entries of the event stream as a fresh group.
func readAllBodies(t *testing.T, q *Queue, n int) []string {
	t.Helper()
	var got []string
	deadline := time.Now().Add(waitFor)
	for len(got) < n {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %d entries; got %v", waitFor, n, got)
		}
		msgs, err := q.Read(t.Context(), ports.EventStream, "check", "c", n-len(got), 100*time.Millisecond)
		require.NoError(t, err)
		for _, m := range msgs {
			got = append(got, m.Body)
		}
	}
	return got
}

// TestBlockedReaderTakesAPublishWhole checks that a reader blocked on the
// stream gets every entry of one pipeline in a single read. Redis serves
// blocked readers after each command it runs, so a plain pipeline of
// XADDs would hand the reader its first entry alone.
func TestBlockedReaderTakesAPublishWhole(t *testing.T) {
	t.Parallel()
	qopts := DefaultQueueOptions()
	qopts.Prefix = redistest.Prefix(t)
	qopts.BlockSlice = waitFor
	name := "reader-" + strings.ReplaceAll(qopts.Prefix, ":", "-") // no other test's
	reader := newTestQueue(t, redistest.NamedClient(t, name), qopts)
	publisher := newTestQueue(t, redistest.Client(t), qopts)

	// The group exists before the read, which then blocks at once.
	_, err := reader.Read(t.Context(), ports.DeliveryStream, "workers", "w", 1, 0)
	require.NoError(t, err)
	read := make(chan []ports.Message, 1)
	go func() {
		msgs, err := reader.Read(t.Context(), ports.DeliveryStream, "workers", "w", 100, waitFor)
		assert.NoError(t, err)
		read <- msgs
	}()
	admin := redistest.Client(t)
	require.Eventually(t, func() bool {
		clients, err := admin.ClientList(t.Context()).Result()
		if err != nil {
			return false
		}
		for line := range strings.Lines(clients) {
			if strings.Contains(line, " name="+name+" ") && strings.Contains(line, " cmd=xreadgroup") && strings.Contains(line, " flags=b ") {
				return true
			}
		}
		return false
	}, waitFor, time.Millisecond, "the reader to block on the stream")

	require.NoError(t, publisher.Publish(t.Context(), ports.DeliveryStream, queuetest.Entries("a", "b", "c")...))
	select {
	case msgs := <-read:
		bodies := make([]string, len(msgs))
		for i, m := range msgs {
			bodies[i] = m.Body
		}
		assert.Equal(t, []string{"a", "b", "c"}, bodies, "one read takes the whole publish")
	case <-time.After(waitFor):
		t.Fatalf("waited %s for the blocked read", waitFor)
	}
}
