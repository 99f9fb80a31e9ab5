package application

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// Consumer reads one stream through a consumer group and hands entries to a
// handler, acknowledging entries only after the handler finished them.
type Consumer struct {
	Queue  ports.Queue
	Stream string
	Group  string
	// Name identifies this consumer within the group; unique per process.
	Name string
	// Batch is the most entries one read asks for.
	Batch int
	// Block is how long one read waits for entries.
	Block time.Duration
	// Concurrency is how many handler calls run at once.
	Concurrency int
	// PerEntry hands each entry to its own handler call (deliveries, which
	// wait on endpoints); otherwise a whole read is one call (fan-out, which
	// batches its writes).
	PerEntry bool
	// Handle processes entries and returns the ids of those to acknowledge.
	// Its context is not cancelled by shutdown, so work in flight finishes.
	Handle func(ctx context.Context, msgs []ports.Message) (ack []string)
	// Valid, when set, vets each entry's body before the handler sees it.
	// Entries it refuses are acknowledged at once and reported to
	// OnMalformed: retrying them could never succeed.
	Valid func(body string) bool
	// OnMalformed is told about refused entries (for logs and metrics).
	OnMalformed func(m ports.Message)
	// OnError is told about read and ack failures (for logs and metrics).
	OnError func(err error)
	// AckDelay is the longest a finished entry waits for others to be
	// acknowledged with it in one call; 0 means DefaultAckDelay. It waits
	// only while entries finish often enough that others are expected
	// within AckDelay (domain.Linger): after a quiet spell an entry is
	// acknowledged at once. Entries finished while an acknowledgement is
	// under way wait for it to end, so under load one call acknowledges
	// many.
	AckDelay time.Duration
	// AckBatch is the most entries one acknowledgement takes; 0 means
	// DefaultAckBatch. A full batch goes at once, without waiting AckDelay.
	AckBatch int
}

// Acknowledgement batching defaults. An acknowledgement only tells the
// queue not to hand the entry out again; the work it stands for is already
// committed, so it lingers as every stage after an endpoint's answer does
// (domain.AfterAnswerLinger), content with domain.AfterAnswerEnough:
// under light load (100 entries/s) it gathers several entries into one
// queue round trip instead of one each.
const (
	// DefaultAckDelay is Consumer.AckDelay's default.
	DefaultAckDelay = domain.AfterAnswerLinger
	// DefaultAckBatch is Consumer.AckBatch's default.
	DefaultAckBatch = 256
)

// Run reads until ctx ends, then waits for handlers in flight and
// acknowledges what they finished. It never acknowledges an entry whose
// handler did not finish. Acknowledgements are batched (see AckDelay); by
// the time Run returns, everything finished has been acknowledged (or the
// acknowledgement's failure reported to OnError).
func (c *Consumer) Run(ctx context.Context) error {
	concurrency := max(c.Concurrency, 1)
	batch := max(c.Batch, 1)
	slots := make(chan struct{}, concurrency)
	var wg sync.WaitGroup
	work := context.WithoutCancel(ctx)
	backoff := 50 * time.Millisecond

	// Finished ids go to one acknowledging goroutine. A handler hands its
	// ids over only after Handle returned them, so nothing unfinished can
	// be in a batch; the buffer lets every handler in flight hand over
	// without waiting for an acknowledgement under way.
	finished := make(chan []string, concurrency)
	acked := make(chan struct{})
	go func() {
		defer close(acked)
		c.acknowledge(work, finished)
	}()

	run := func(msgs []ports.Message) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			if ack := c.Handle(work, msgs); len(ack) > 0 {
				finished <- ack
			}
		}()
	}

	for ctx.Err() == nil {
		slots <- struct{}{}
		want := batch
		if c.PerEntry {
			// Ask for no more than the free slots take at once, so entries
			// do not wait here while another consumer is idle.
			want = 1 + c.takeFree(slots, batch-1)
		}
		msgs, err := c.Queue.Read(ctx, c.Stream, c.Group, c.Name, want, c.Block)
		if err != nil || len(msgs) == 0 {
			c.release(slots, c.slotsFor(want))
			if err != nil && ctx.Err() == nil {
				c.report(err)
				select {
				case <-ctx.Done():
				case <-time.After(backoff):
				}
				backoff = min(backoff*2, 2*time.Second)
			}
			continue
		}
		backoff = 50 * time.Millisecond
		msgs = c.dropMalformed(ctx, msgs)
		if len(msgs) == 0 {
			c.release(slots, c.slotsFor(want))
			continue
		}
		if c.PerEntry {
			c.release(slots, want-len(msgs))
			for i := range msgs {
				run(msgs[i : i+1])
			}
		} else {
			run(msgs)
		}
	}
	wg.Wait()
	close(finished)
	<-acked
	if errors.Is(ctx.Err(), context.Canceled) {
		return nil
	}
	return ctx.Err()
}

// acknowledge acknowledges the ids that arrive on finished, in batches: a
// batch starts with the first id to arrive and takes whatever else arrives
// while it lingers for company (at most AckDelay), or until it holds
// AckBatch ids, then goes in one call.
// When finished is closed it acknowledges what it holds and returns.
func (c *Consumer) acknowledge(ctx context.Context, finished <-chan []string) {
	delay := c.AckDelay
	if delay <= 0 {
		delay = DefaultAckDelay
	}
	limit := c.AckBatch
	if limit <= 0 {
		limit = DefaultAckBatch
	}
	linger := domain.Linger{Max: delay, Enough: domain.AfterAnswerEnough}
	timer := time.NewTimer(delay)
	timer.Stop()
	var pending []string
	flush := func() {
		for start := 0; start < len(pending); start += limit {
			if err := c.Queue.Ack(ctx, c.Stream, c.Group, pending[start:min(start+limit, len(pending))]...); err != nil {
				c.report(err)
			}
		}
		pending = pending[:0]
	}
	for {
		ids, ok := <-finished
		if !ok {
			return
		}
		pending = append(pending, ids...)
		linger.Arrived(time.Now(), len(ids))
		if wait, _ := linger.Wait(len(pending), limit); wait > 0 {
			timer.Reset(wait)
		collect:
			for len(pending) < limit {
				select {
				case ids, ok := <-finished:
					if !ok {
						timer.Stop()
						flush()
						return
					}
					pending = append(pending, ids...)
					linger.Arrived(time.Now(), len(ids))
				case <-timer.C:
					break collect
				}
			}
			timer.Stop()
		}
		flush()
	}
}

// dropMalformed acknowledges and reports the entries Valid refuses and
// returns the rest.
func (c *Consumer) dropMalformed(ctx context.Context, msgs []ports.Message) []ports.Message {
	if c.Valid == nil {
		return msgs
	}
	kept := msgs[:0]
	var bad []string
	for _, m := range msgs {
		if c.Valid(m.Body) {
			kept = append(kept, m)
			continue
		}
		bad = append(bad, m.ID)
		if c.OnMalformed != nil {
			c.OnMalformed(m)
		}
	}
	if len(bad) > 0 {
		if err := c.Queue.Ack(context.WithoutCancel(ctx), c.Stream, c.Group, bad...); err != nil {
			c.report(err)
		}
	}
	return kept
}

// takeFree takes up to n more free slots without waiting.
func (c *Consumer) takeFree(slots chan struct{}, n int) int {
	for taken := 0; taken < n; taken++ {
		select {
		case slots <- struct{}{}:
		default:
			return taken
		}
	}
	return n
}

func (c *Consumer) slotsFor(want int) int {
	if c.PerEntry {
		return want
	}
	return 1
}

func (c *Consumer) release(slots chan struct{}, n int) {
	for range n {
		<-slots
	}
}

func (c *Consumer) report(err error) {
	if c.OnError != nil {
		c.OnError(err)
	}
}
