package application

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// Scheduler defaults (SPEC §7).
const (
	DefaultSchedulerBatchSize = 500
	DefaultVisibilityTimeout  = 30 * time.Second
)

// Consumer group names, one per stream.
const (
	FanOutGroup  = "fanout"
	DeliverGroup = "deliver"
)

// Schedule re-enqueues work from PostgreSQL state: due retries, deliveries
// and events whose append to a stream was lost, deliveries whose worker died
// mid-attempt, and stream entries whose consumer died before acknowledging.
// It also trims what every consumer group has finished from the streams,
// frees the idempotency keys whose window ended, and ages the delivery
// history out (History).
// Any number of schedulers may run at once.
type Schedule struct {
	Events     ports.EventStore
	Deliveries ports.DeliveryScan
	// Subscriptions, when set, lets each tick take the deletions of
	// subscriptions that were interrupted one batch further.
	Subscriptions ports.SubscriptionDeletions
	// DeleteBatch is the batch of those deletions; DefaultDeleteBatch
	// when zero.
	DeleteBatch int
	Queue       ports.Queue
	Clock       ports.Clock
	// BatchSize bounds each scan.
	BatchSize int
	// VisibilityTimeout is how long a stream entry or an enqueued delivery
	// may sit unacknowledged before it is handed out again. It is also the
	// grace period before an event that was never fanned out is re-enqueued.
	VisibilityTimeout time.Duration
	// IdempotencyWindow is how long an idempotency key is remembered
	// (Ingest.IdempotencyWindow); DefaultIdempotencyWindow when zero.
	IdempotencyWindow time.Duration
	// Consumer names this scheduler when it reclaims stream entries.
	Consumer string
	// CatchUp is how long Run waits after a scan took a whole batch; 0
	// means a tenth of its interval. Not at once: deliveries postponed
	// because their endpoint's max_in_flight was taken come due a few
	// hundred milliseconds later, and enqueued the moment they are due
	// they are mostly refused again while the endpoint's slots are still
	// taken (W5 lost 5–10 % that way, where a tenth of a second's pause
	// lost nothing).
	CatchUp time.Duration
	// History, when set, ages the delivery history out: a tick (at most
	// one per HistoryInterval) makes the windows ahead and drops what is
	// older than Retention and terminal (SPEC §5).
	History ports.Retention
	// Retention is how long history is kept; domain.DefaultRetention when
	// zero.
	Retention time.Duration
	// HistoryInterval is the least time between two maintenances of the
	// history, so that ticks in quick succession (CatchUp) do not each
	// read the catalog; DefaultHistoryInterval when zero. Windows are made
	// two ahead, so a few seconds' delay costs nothing.
	HistoryInterval time.Duration

	// lastHistory is when the history was last maintained (Unix
	// nanoseconds of the Clock), 0 before the first time.
	lastHistory atomic.Int64
	// lastSlow is when the slow scans last ran (see slowDue), and
	// slowBacklog says they stopped at their batch limit then.
	lastSlow    atomic.Int64
	slowBacklog atomic.Bool
}

// DefaultHistoryInterval is Schedule.HistoryInterval's default.
const DefaultHistoryInterval = 5 * time.Second

// Swept counts what one Tick re-enqueued.
type Swept struct {
	DueDeliveries   int
	UnfannedEvents  int
	ReclaimedEvents int
	ReclaimedDelivs int
	// DeletionBatches is how many batches of interrupted subscription
	// deletions it deleted.
	DeletionBatches int
	// ExpiredKeys counts the idempotency keys it freed.
	ExpiredKeys int
	// History is what its history maintenance did.
	History ports.Maintenance
}

// Tick runs one pass of every scan. It keeps going after a failed scan and
// returns the failures joined.
func (uc *Schedule) Tick(ctx context.Context) (Swept, error) {
	var out Swept
	var errs []error
	now := uc.Clock.Now()

	due, err := uc.Deliveries.DueDeliveries(ctx, now, uc.visibility(), uc.batch())
	if err == nil && len(due) > 0 {
		entries := make([]ports.Entry, len(due))
		for i, d := range due {
			entries[i] = ports.Entry{Key: d.SubscriptionID, Body: d.ID}
		}
		err = uc.Queue.Publish(ctx, ports.DeliveryStream, entries...)
	}
	if err != nil {
		errs = append(errs, fmt.Errorf("enqueue due deliveries: %w", err))
	} else {
		out.DueDeliveries = len(due)
	}

	events, err := uc.Events.UnfannedEvents(ctx, now, uc.visibility(), uc.batch())
	if err == nil && len(events) > 0 {
		err = uc.Queue.Publish(ctx, ports.EventStream, eventEntries(events)...)
	}
	if err != nil {
		errs = append(errs, fmt.Errorf("enqueue unfanned events: %w", err))
	} else {
		out.UnfannedEvents = len(events)
	}

	slow := uc.slowDue(now)
	if slow {
		uc.slowScans(ctx, now, &out, &errs)
	}

	if uc.History != nil && uc.historyDue(now) {
		// Cheap when there is nothing to do (a catalog read); one replica
		// at a time does it, the others skip.
		m, err := uc.History.MaintainHistory(ctx, now, cmp.Or(uc.Retention, domain.DefaultRetention))
		out.History = m
		if err != nil {
			errs = append(errs, fmt.Errorf("maintain history: %w", err))
		}
	}

	if slow {
		for _, stream := range []string{ports.EventStream, ports.DeliveryStream} {
			if err := uc.Queue.Trim(ctx, stream); err != nil {
				errs = append(errs, fmt.Errorf("trim %s: %w", stream, err))
			}
		}
		b := uc.batch()
		uc.slowBacklog.Store(out.ReclaimedEvents >= b || out.ReclaimedDelivs >= b || out.ExpiredKeys >= b || out.DeletionBatches > 0)
	}
	return out, errors.Join(errs...)
}

// slowScans are the scans that need not run every tick (slowDue):
// reclaiming stream entries idle past the visibility timeout, freeing
// idempotency keys past their window, and finishing interrupted
// subscription deletions.
func (uc *Schedule) slowScans(ctx context.Context, now time.Time, out *Swept, errs *[]error) {
	n, err := uc.reclaim(ctx, ports.EventStream, FanOutGroup)
	out.ReclaimedEvents = n
	*errs = append(*errs, err)
	n, err = uc.reclaim(ctx, ports.DeliveryStream, DeliverGroup)
	out.ReclaimedDelivs = n
	*errs = append(*errs, err)

	window := cmp.Or(uc.IdempotencyWindow, DefaultIdempotencyWindow)
	n, err = uc.Events.ExpireIdempotencyKeys(ctx, now.Add(-window), uc.batch())
	out.ExpiredKeys = n
	if err != nil {
		*errs = append(*errs, fmt.Errorf("free expired idempotency keys: %w", err))
	}

	if uc.Subscriptions != nil {
		n, err := uc.finishDeletions(ctx)
		out.DeletionBatches = n
		*errs = append(*errs, err)
	}
}

// slowDue reports whether the slow scans (slowScans, and the streams'
// trims) are due at now, and if so marks them done at now. They run at
// most once per tenth of the visibility timeout: what they look for has
// waited a visibility timeout (an entry whose consumer went quiet) or
// longer (a key past its window, a deletion a crash interrupted), so a
// tenth more is little, and an idle scheduler spares Redis and PostgreSQL
// a dozen commands a tick. After a pass that stopped at its batch limit
// they run again at the next tick, as a backlog needs.
func (uc *Schedule) slowDue(now time.Time) bool {
	every := uc.visibility() / 10
	if uc.slowBacklog.Load() {
		every = 0
	}
	return dueEvery(&uc.lastSlow, now, every)
}

// historyDue reports whether the history is due for maintenance at now,
// and if so marks it done at now.
func (uc *Schedule) historyDue(now time.Time) bool {
	return dueEvery(&uc.lastHistory, now, cmp.Or(uc.HistoryInterval, DefaultHistoryInterval))
}

// dueEvery reports whether work done at most once per every, last done at
// *last (Unix nanoseconds, 0 for never), is due at now, and if so marks
// it done at now; of concurrent callers, one wins.
func dueEvery(last *atomic.Int64, now time.Time, every time.Duration) bool {
	prev := last.Load()
	if prev != 0 && now.Sub(time.Unix(0, prev)) < every {
		return false
	}
	return last.CompareAndSwap(prev, now.UnixNano())
}

// Run ticks until ctx ends, and tells report each tick's outcome. After a
// tick in which a scan stopped at its batch limit it ticks again after
// CatchUp, since more may be waiting: a backlog (retries come due after an
// outage, deliveries postponed by their endpoint's limits) then drains a
// batch per CatchUp instead of a batch per interval. Otherwise it waits
// interval.
func (uc *Schedule) Run(ctx context.Context, interval time.Duration, report func(Swept, error)) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	catchUp := uc.CatchUp
	if catchUp <= 0 {
		catchUp = interval / 10
	}
	for {
		swept, err := uc.Tick(ctx)
		report(swept, err)
		if ctx.Err() != nil {
			return
		}
		wait := ticker.C
		if err == nil && uc.stoppedAtLimit(swept) {
			wait = time.After(catchUp)
		}
		select {
		case <-ctx.Done():
			return
		case <-wait:
		}
	}
}

// stoppedAtLimit reports whether a scan of s took a whole batch.
func (uc *Schedule) stoppedAtLimit(s Swept) bool {
	b := uc.batch()
	return s.DueDeliveries >= b || s.UnfannedEvents >= b || s.ReclaimedEvents >= b || s.ReclaimedDelivs >= b ||
		s.ExpiredKeys >= b || s.DeletionBatches > 0
}

// finishDeletions takes each subscription deletion under way one batch
// further: one a crash interrupted is finished within a few ticks, and
// one a request is still making progresses faster, harmlessly (its
// batches lock their rows). It returns how many batches it deleted.
func (uc *Schedule) finishDeletions(ctx context.Context) (int, error) {
	ids, err := uc.Subscriptions.UnfinishedDeletions(ctx, uc.batch())
	if err != nil {
		return 0, fmt.Errorf("list unfinished subscription deletions: %w", err)
	}
	batch := cmp.Or(uc.DeleteBatch, DefaultDeleteBatch)
	var errs []error
	n := 0
	for _, id := range ids {
		_, err := uc.Subscriptions.DeleteSubscription(ctx, id, batch)
		switch {
		case errors.Is(err, domain.ErrNotFound):
			// Finished by another caller meanwhile.
		case err != nil:
			errs = append(errs, fmt.Errorf("finish deleting subscription %s: %w", id, err))
		default:
			n++
		}
	}
	return n, errors.Join(errs...)
}

// reclaim takes over entries idle past the visibility timeout, appends them
// again so any live consumer picks them up (a delivery's entry unmarked:
// see entries.go), then acknowledges the old ones.
// A crash between the two leaves a duplicate entry, which is harmless:
// consumers are idempotent.
func (uc *Schedule) reclaim(ctx context.Context, stream, group string) (int, error) {
	msgs, err := uc.Queue.Reclaim(ctx, stream, group, uc.Consumer, uc.visibility(), uc.batch())
	if err != nil || len(msgs) == 0 {
		if err != nil {
			err = fmt.Errorf("reclaim %s: %w", stream, err)
		}
		return 0, err
	}
	entries := make([]ports.Entry, len(msgs))
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		entries[i], ids[i] = ports.Entry{Key: m.Key, Body: m.Body}, m.ID
		if stream == ports.DeliveryStream {
			// Its first holder may still be attempting the delivery under
			// its creator's reservation: the next one claims it.
			entries[i].Body = plainEntry(m.Body)
		}
	}
	if err := uc.Queue.Publish(ctx, stream, entries...); err != nil {
		return 0, fmt.Errorf("re-append reclaimed %s entries: %w", stream, err)
	}
	if err := uc.Queue.Ack(ctx, stream, group, ids...); err != nil {
		return 0, fmt.Errorf("ack reclaimed %s entries: %w", stream, err)
	}
	return len(msgs), nil
}

func (uc *Schedule) batch() int {
	if uc.BatchSize <= 0 {
		return DefaultSchedulerBatchSize
	}
	return uc.BatchSize
}

func (uc *Schedule) visibility() time.Duration { return visibilityTimeout(uc.VisibilityTimeout) }

// visibilityTimeout is d, or DefaultVisibilityTimeout when d is not set:
// the scheduler's, and how long new deliveries are reserved (entries.go).
func visibilityTimeout(d time.Duration) time.Duration {
	if d <= 0 {
		return DefaultVisibilityTimeout
	}
	return d
}
