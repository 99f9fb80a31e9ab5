// Package batch gathers concurrent calls into batches, so that many
// callers share one round trip and one commit (group commit): the way
// PostgreSQL's own WAL flush and Redis pipelines amortise a per-request cost
// that would otherwise cap throughput. Each caller still returns only once
// the batch holding its item was written, with that item's outcome.
//
// There is no background goroutine and so no lifecycle: the first caller to
// find no write in progress becomes the leader and, once the goroutines
// already runnable have had their turn (callers come in bursts), writes
// what is pending;
// callers arriving meanwhile wait, and when the write finishes the leader
// wakes them and hands leadership to the first caller still pending, which
// writes the next batch. A leader writes one batch, the one holding its own
// item, so no caller's latency grows beyond its own batch plus the one in
// progress when it arrived. With Limits.Writers above 1, that many batches
// may be written at once: while one waits for its commit (a WAL flush, a
// round trip), the next is already on its way.
//
// A leader may first linger for company (Limits.Linger): how long follows
// the arrival rate of calls, as domain.Linger decides, so an idle Batcher
// never waits and a busy one waits only until its batch is as big as the
// rate promises.
//
// Rule of dependency: the standard library and domain's Linger. The
// adapters that batch writes (postgres, redis) import it; it knows nothing
// about what they write.
package batch

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dispatch-webhooks/dispatch/domain"
)

// DefaultMaxItems is the batch size cap when Limits.MaxItems is 0.
const DefaultMaxItems = 512

// WriteFunc writes items as one batch and reports each item's outcome in
// errs (len(errs) == len(items), all nil on entry): an item whose errs entry
// stays nil was written. ctx ends only when every caller in the batch has
// given up (see Batcher.Commit). A WriteFunc must not call Commit on the
// same Batcher.
type WriteFunc[T any] func(ctx context.Context, items []T, errs []error)

// Limits bounds a batch. A batch always takes at least one item, however
// heavy: the leader's own.
type Limits[T any] struct {
	// MaxItems is the most items in one batch; 0 means DefaultMaxItems.
	MaxItems int
	// MaxWeight, when above 0, is the most total Weigh of a batch (bytes,
	// stream entries, …).
	MaxWeight int
	// Weigh returns an item's weight; nil weighs every item 1.
	Weigh func(T) int
	// Linger is the longest a leader waits for company before it takes
	// its batch, so that calls arriving meanwhile share its round trip; 0
	// means never. It waits only while the calls' arrival rate promises
	// company within Linger, and only until the batch holds what the rate
	// promises or MaxItems (domain.Linger): an idle Batcher never waits, a
	// steady trickle turns batches of one into batches of several (fewer
	// round trips, fewer wake-ups), and a busy one fills its batches
	// quickly. Every call in a batch that waited returns that much later,
	// so the longest waits suit writes nobody is kept waiting for.
	Linger time.Duration
	// Now stamps arrivals for the linger's estimate of their rate; nil
	// means time.Now. Tests pass a clock of their own.
	Now func() time.Time
	// Enough is the batch size a lingering leader is content with
	// (domain.Linger.Enough); 0 means MaxItems.
	Enough int
	// Urgent, when set, says an item must not wait for company: a leader
	// that has one pending does not linger, or stops lingering when one
	// arrives (a write someone waits on, among writes nobody does).
	Urgent func(T) bool
	// Writers is how many batches may be written at once; 0 means 1.
	// Batches written at once commit in any order.
	Writers int
}

// Batcher gathers concurrent Commit calls into batches written by a
// WriteFunc, one batch at a time. Safe for concurrent use; the zero value is
// not usable, use New.
type Batcher[T any] struct {
	write  WriteFunc[T]
	limits Limits[T]

	mu sync.Mutex
	// pending are the calls not yet taken into a batch, oldest first.
	// Whenever it is not empty, leaders is at least 1: some caller is
	// writing a batch, or has been promoted to write the next one.
	pending []*call[T]
	// leaders counts the callers writing a batch or promoted to write one;
	// at most limits.Writers.
	leaders int
	// linger follows the calls' arrival rate (see Limits.Linger).
	linger domain.Linger
	// company, while a leader lingers, is closed when a call arrives.
	company chan struct{}
	// hurry says an Urgent item is pending: no leader lingers.
	hurry bool
}

// New returns a Batcher that writes batches with write.
func New[T any](write WriteFunc[T], limits Limits[T]) *Batcher[T] {
	if limits.MaxItems <= 0 {
		limits.MaxItems = DefaultMaxItems
	}
	limits.Writers = max(limits.Writers, 1)
	if limits.Now == nil {
		limits.Now = time.Now
	}
	return &Batcher[T]{write: write, limits: limits, linger: domain.Linger{Max: limits.Linger, Enough: limits.Enough}}
}

// callState is where a call is; it changes under Batcher.mu only.
type callState int

const (
	queued   callState = iota // in pending, waiting for a batch
	promoted                  // in pending at the head, to lead the next batch
	taken                     // in a batch being written
	done                      // its outcome is in err
)

// call is one Commit waiting for its batch.
type call[T any] struct {
	ctx   context.Context
	item  T
	state callState
	// err is the outcome, written before wake is closed.
	err error
	// wake is closed when the call is promoted or done.
	wake chan struct{}
}

// ErrWritePanicked is the outcome of every item of a batch whose WriteFunc
// panicked (the panic then goes on in the leader's goroutine).
var ErrWritePanicked = errors.New("group commit: batch write panicked")

// Commit adds item to the next batch and returns once that batch has been
// written, with the outcome write reported for item.
//
// While it waits for its batch, Commit respects ctx: it returns ctx's error
// promptly. If item was not yet taken into a batch, it is dropped and never
// written. If its batch was already being written, the write goes on for the
// other callers and may still succeed: a caller that gave up cannot tell
// whether its item was written, as with any write whose answer is lost on
// the way. The write's own ctx ends only once every caller in the batch has
// given up. A leader cannot give up halfway: it returns when its batch is
// written (or the write fails because everyone else gave up too). A caller
// that gave up must not change what item refers to: its batch may still be
// reading it.
func (b *Batcher[T]) Commit(ctx context.Context, item T) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c := &call[T]{ctx: ctx, item: item, wake: make(chan struct{})}
	var now time.Time
	if b.limits.Linger > 0 {
		now = b.limits.Now()
	}
	b.mu.Lock()
	b.pending = append(b.pending, c)
	if b.limits.Linger > 0 {
		b.linger.Arrived(now, 1)
		if b.limits.Urgent != nil && b.limits.Urgent(item) {
			b.hurry = true
		}
		if b.company != nil {
			close(b.company)
			b.company = nil
		}
	}
	if b.leaders < b.limits.Writers {
		b.leaders++
		c.state = promoted
		b.mu.Unlock()
		// Callers often come in bursts: a consumer starts a goroutine per
		// entry of a read, a group commit wakes all of its callers at once.
		// Yielding lets those already runnable queue before the batch is
		// taken, rather than the first writing its item alone and the rest
		// the next batch. With nothing else runnable it returns at once.
		runtime.Gosched()
		b.lead(c)
		return c.err
	}
	b.mu.Unlock()

	select {
	case <-c.wake:
	case <-ctx.Done():
		b.mu.Lock()
		switch c.state {
		case queued:
			b.remove(c)
		case promoted:
			// Promoted just as ctx ended: pass leadership on rather than
			// write a batch nobody here waits for.
			b.remove(c)
			b.leaders--
			b.promoteHead()
		case taken:
			// Its batch is being written and may still succeed.
		case done:
			b.mu.Unlock()
			return c.err // finished meanwhile: the real outcome beats ctx's
		}
		b.mu.Unlock()
		return ctx.Err()
	}
	// The state was set before wake was closed, and only this goroutine
	// moves a promoted call on.
	if c.state == promoted {
		b.lead(c)
	}
	return c.err
}

// Waiting returns how many callers wait for their item to be taken into a
// batch: the backlog behind the write in progress (a gauge for metrics;
// tests use it to line callers up).
func (b *Batcher[T]) Waiting() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.pending)
}

// lead writes one batch, starting with self (the head of pending), after
// lingering for company, then wakes its callers and hands leadership on.
func (b *Batcher[T]) lead(self *call[T]) {
	b.lingerForCompany()
	b.mu.Lock()
	batch := b.take(self)
	b.mu.Unlock()

	finished := false
	defer func() {
		if !finished {
			for _, c := range batch {
				c.err = ErrWritePanicked
			}
		}
		b.mu.Lock()
		for _, c := range batch {
			c.state = done
			if c != self {
				close(c.wake)
			}
		}
		b.leaders--
		b.promoteHead()
		b.mu.Unlock()
	}()
	b.writeBatch(self.ctx, batch)
	finished = true
}

// lingerForCompany waits as long as domain.Linger says a batch of what is
// pending should wait for company: until that company has come, the wait
// ran out, or none came for the Linger's patience.
func (b *Batcher[T]) lingerForCompany() {
	if b.limits.Linger <= 0 {
		return
	}
	b.mu.Lock()
	wait, more := b.linger.Wait(len(b.pending), b.limits.MaxItems)
	if wait <= 0 || b.hurry || b.company != nil { // another leader lingers already
		b.mu.Unlock()
		return
	}
	target, patience := len(b.pending)+more, b.linger.Patience()
	deadline := time.Now().Add(wait)
	for {
		company := make(chan struct{})
		b.company = company
		b.mu.Unlock()
		timer := time.NewTimer(min(patience, time.Until(deadline)))
		var arrived bool
		select {
		case <-company:
			arrived = true
		case <-timer.C:
		}
		timer.Stop()
		b.mu.Lock()
		if b.company == company {
			b.company = nil
		}
		if !arrived || b.hurry || len(b.pending) >= target || !time.Now().Before(deadline) {
			b.mu.Unlock()
			return
		}
	}
}

// take removes the next batch from pending: self, the leader, then the
// oldest calls that are only queued (others promoted to lead a batch of
// their own keep their place). b.mu is held.
func (b *Batcher[T]) take(self *call[T]) []*call[T] {
	batch := []*call[T]{self}
	weight := b.weigh(self.item)
	full := false
	kept := b.pending[:0]
	for _, c := range b.pending {
		if c == self {
			continue
		}
		if full || c.state != queued || len(batch) == b.limits.MaxItems {
			kept = append(kept, c)
			continue
		}
		w := b.weigh(c.item)
		if b.limits.MaxWeight > 0 && weight+w > b.limits.MaxWeight {
			full = true // keep the order: nothing after it joins either
			kept = append(kept, c)
			continue
		}
		weight += w
		batch = append(batch, c)
	}
	clear(b.pending[len(kept):]) // let taken calls be collected
	b.pending = kept
	if len(b.pending) == 0 {
		b.pending = nil // start over rather than creep along the array
	}
	b.hurry = false
	for _, c := range b.pending {
		if c.state == queued && b.limits.Urgent != nil && b.limits.Urgent(c.item) {
			b.hurry = true // left for the next batch, which must not linger either
			break
		}
	}
	for _, c := range batch {
		c.state = taken
	}
	return batch
}

func (b *Batcher[T]) weigh(item T) int {
	if b.limits.Weigh == nil {
		return 1
	}
	return b.limits.Weigh(item)
}

// promoteHead makes the oldest pending call that is only queued the leader
// of the next batch, if a writer is free. b.mu is held.
func (b *Batcher[T]) promoteHead() {
	if b.leaders >= b.limits.Writers {
		return
	}
	for _, c := range b.pending {
		if c.state == queued {
			b.leaders++
			c.state = promoted
			close(c.wake)
			return
		}
	}
}

// remove drops c, which gave up, from pending. b.mu is held.
func (b *Batcher[T]) remove(c *call[T]) {
	if i := slices.Index(b.pending, c); i >= 0 {
		b.pending = slices.Delete(b.pending, i, i+1)
	}
}

// writeBatch runs write on batch with a ctx that ends when every caller in
// the batch has given up, and stores each outcome.
func (b *Batcher[T]) writeBatch(leaderCtx context.Context, batch []*call[T]) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(leaderCtx))
	defer cancel()
	var waiting atomic.Int64
	waiting.Store(int64(len(batch)))
	items := make([]T, len(batch))
	var stops []func() bool
	for i, c := range batch {
		items[i] = c.item
		if c.ctx.Done() == nil {
			continue // never gives up, so the write is never given up either
		}
		stops = append(stops, context.AfterFunc(c.ctx, func() {
			if waiting.Add(-1) == 0 {
				cancel()
			}
		}))
	}
	defer func() {
		for _, stop := range stops {
			stop()
		}
	}()
	errs := make([]error, len(batch))
	b.write(ctx, items, errs)
	for i, c := range batch {
		c.err = errs[i]
	}
}
