package application

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// FanOut turns events into deliveries, one per matching active subscription.
type FanOut struct {
	Subscriptions ports.SubscriptionStore
	Events        ports.EventStore
	Deliveries    ports.DeliveryFanOut
	Queue         ports.Queue
	Clock         ports.Clock
	// VisibilityTimeout is the scheduler's (see Schedule); new deliveries
	// are reserved for as long (see entries.go).
	VisibilityTimeout time.Duration
	// Lag, when set with MaxUnread above 0, holds a batch back while the
	// delivery stream has more than MaxUnread entries no worker has read
	// yet (see awaitWorkers).
	Lag       ports.StreamLag
	MaxUnread int64
	// Held, when set, is told how long each batch that waited was held
	// back.
	Held func(time.Duration)
	// MaxTries is how many tries to fan out an event the store refuses
	// (ports.RejectedFanOuts) make before the event is settled as failed;
	// 0 means DefaultFanOutTries.
	MaxTries int
	// Failed, when set, is told of each event settled as failed, and why.
	Failed func(eventID, reason string)
}

// DefaultFanOutTries is how many tries an event the store refuses to fan
// out gets: a refusal for what the event holds repeats, so a few tries only
// guard against a cause that passed (a conflict with a concurrent write)
// before the event is settled as failed rather than tried for ever.
const DefaultFanOutTries = 3

// DefaultFanOutMaxUnread is how many delivery-stream entries the workers may
// have left to read before the fan-out stage waits for them: a quarter of a
// second of work at the highest rates measured, several times what a
// held-back batch takes to be read, matched and written, so workers do not
// run dry; small enough that a burst's fan-out stops competing with the
// first deliveries soon.
const DefaultFanOutMaxUnread = 4096

// backlogPoll is how often a held-back fan-out looks at the stream again.
const backlogPoll = 10 * time.Millisecond

// Handle fans out a batch of events in one store transaction and appends the
// new deliveries to the delivery stream. It is idempotent: an event already
// fanned out yields nothing new, so a redelivered stream entry is harmless.
// An event whose fan-out the store refuses fails alone: the rest of the
// batch is stored, and the refused event is counted a failed try (settled
// as failed after MaxTries) and left to the scheduler's outbox sweep.
// When only the append fails, it returns an error wrapping
// ErrEnqueueDeferred: the deliveries are committed and the scheduler's scan
// enqueues them, so the stream entries may be acknowledged.
func (uc *FanOut) Handle(ctx context.Context, eventIDs []string) error {
	if err := uc.awaitWorkers(ctx); err != nil {
		return err
	}
	events, err := uc.Events.GetEvents(ctx, eventIDs)
	if err != nil {
		return fmt.Errorf("load events: %w", err)
	}
	if len(events) == 0 {
		return nil
	}
	now := uc.Clock.Now()
	fanouts := make([]ports.FanOut, 0, len(events))
	total := 0
	err = uc.Subscriptions.MatchActive(ctx, func(subs *domain.SubscriptionIndex) {
		for _, ev := range events {
			deliveries, _ := deliveriesOf(ev, subs, now, 0, visibilityTimeout(uc.VisibilityTimeout))
			fanouts = append(fanouts, ports.FanOut{EventID: ev.ID, Deliveries: deliveries})
			total += len(deliveries)
		}
	})
	if err != nil {
		return fmt.Errorf("load subscriptions: %w", err)
	}
	made := make([]domain.Delivery, 0, total)
	for _, f := range fanouts {
		made = append(made, f.Deliveries...)
	}
	created, err := uc.Deliveries.CreateDeliveries(ctx, fanouts)
	var rejected *ports.RejectedFanOuts
	switch {
	case errors.As(err, &rejected):
		// The others are stored; each refused one is counted, and settled
		// once it has had its tries. One not settled yet stays unfanned,
		// for the scheduler's outbox sweep to bring back.
		if err := uc.countFailures(ctx, rejected, now); err != nil {
			return err
		}
	case err != nil:
		return fmt.Errorf("store deliveries: %w", err)
	}
	if len(created) == 0 {
		return nil
	}
	if err := uc.Queue.Publish(ctx, ports.DeliveryStream, freshEntries(stored(made, created))...); err != nil {
		return fmt.Errorf("%w: append %d deliveries: %v", ErrEnqueueDeferred, len(created), err)
	}
	return nil
}

// countFailures records a failed try for each event whose fan-out the
// store refused, in id order.
func (uc *FanOut) countFailures(ctx context.Context, rejected *ports.RejectedFanOuts, now time.Time) error {
	tries := uc.MaxTries
	if tries <= 0 {
		tries = DefaultFanOutTries
	}
	for _, id := range slices.Sorted(maps.Keys(rejected.Reasons)) {
		reason := rejected.Reasons[id]
		settled, err := uc.Events.FailFanOut(ctx, id, reason, now, tries)
		if err != nil {
			return fmt.Errorf("count failed fan-out of event %s (%s): %w", id, reason, err)
		}
		if settled && uc.Failed != nil {
			uc.Failed(id, reason)
		}
	}
	return nil
}

// awaitWorkers waits while the workers have more than MaxUnread entries of
// the delivery stream still to read (backpressure). An event fans out to as
// many deliveries as it has subscriptions, far faster than they are
// delivered: unchecked, a burst of publishes fills the stream (Redis's
// memory) with entries that wait there for minutes, past the reservation
// their deliveries were given (VisibilityTimeout), while writing them takes
// the CPU and PostgreSQL the deliveries in front of them need. Held back,
// the events wait in their own stream instead, durable in PostgreSQL.
//
// It waits at most a sixth of the visibility timeout, then fans out anyway,
// so a batch is acknowledged well before the scheduler would hand its
// entries to another consumer, and fan-out goes on, slowly, while no worker
// reads the deliveries at all. A lag it cannot read does not hold the batch
// back; only ctx ending does: it returns ctx's error, and the batch stays
// in the stream.
func (uc *FanOut) awaitWorkers(ctx context.Context) error {
	if uc.Lag == nil || uc.MaxUnread <= 0 {
		return nil
	}
	start := time.Now()
	deadline := start.Add(visibilityTimeout(uc.VisibilityTimeout) / 6)
	for held := false; ; held = true {
		lag, err := uc.Lag.Lag(ctx, ports.DeliveryStream, DeliverGroup)
		wait := min(backlogPoll, time.Until(deadline))
		if err != nil || lag.Unread <= uc.MaxUnread || wait <= 0 {
			if held && uc.Held != nil {
				uc.Held(time.Since(start))
			}
			return ctx.Err()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

// stored returns the deliveries of made whose ids are in ids, in the order
// of ids: what a store reported storing, as they were made.
func stored(made []domain.Delivery, ids []string) []domain.Delivery {
	if len(made) == len(ids) && slices.EqualFunc(made, ids, func(d domain.Delivery, id string) bool { return d.ID == id }) {
		return made // all of them, as usual
	}
	byID := make(map[string]domain.Delivery, len(made))
	for _, d := range made {
		byID[d.ID] = d
	}
	ds := make([]domain.Delivery, 0, len(ids))
	for _, id := range ids {
		d, ok := byID[id]
		if !ok {
			d = domain.Delivery{ID: id} // its entry tells the id alone
		}
		ds = append(ds, d)
	}
	return ds
}

// deliveriesOf makes e's deliveries, due at now and, when unordered,
// reserved to their fresh entry's holder for reserve: one per subscription
// in active that matches its type, in id order. With limit > 0 it gives up
// (ok false) when there would be more than limit.
func deliveriesOf(e domain.Event, active *domain.SubscriptionIndex, now time.Time, limit int, reserve time.Duration) (deliveries []domain.Delivery, ok bool) {
	matched := active.Match(e.Type)
	if limit > 0 && len(matched) > limit {
		return nil, false
	}
	for _, sub := range matched {
		d := domain.NewDeliveryTo(e, sub, now)
		if d.OrderingKey == "" {
			// Taken by its fresh entry's holder (entries.go); an ordered
			// delivery is claimed, which checks that it is first in line.
			d.ReservedUntil = d.CreatedAt.Add(reserve)
		}
		deliveries = append(deliveries, d)
	}
	return deliveries, true
}
