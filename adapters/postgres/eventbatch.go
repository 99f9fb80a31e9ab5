package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/dispatch-webhooks/dispatch/adapters/postgres/sqlcgen"
	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/internal/batch"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// Limits of one group commit of events (see Store.CreateEvent). A batch of
// 512 1 KiB events is one ~0.5 MiB statement; the byte cap keeps a batch of
// large events from becoming a huge one.
const (
	maxEventBatch      = 512
	maxEventBatchBytes = 4 << 20
	// eventWriters is how many batches are written at once. One: the
	// calls that arrive while a batch waits for its WAL flush make the
	// next batch, twice as big as with two writers, and PostgreSQL
	// flushes its WAL one flush at a time anyway, so a second writer's
	// batch mostly waited for the first one's flush: bigger batches for
	// the same events/s, and less of PostgreSQL's CPU per event.
	eventWriters = 1
	// EventLinger is the longest a batch of events waits for company,
	// and EventEnough the batch it is content with (batch.Limits): it
	// waits only while publishes come often enough to bring some, so a
	// lone publish never waits. The events committed together are then
	// appended to the queue together, read together and claimed,
	// admitted and recorded together, so this one wait gives the whole
	// pipeline its batches at moderate rates: at 1,000 events/s a commit
	// carries about 15 events instead of 1, at 100/s about 2. The 202
	// waits for the commit, so publishes pay it: at most EventLinger,
	// about 15 gaps between publishes when they come faster, nothing when
	// they come slower than one per EventLinger. That keeps a publish's
	// p99 under the 25 ms ingest bound (SPEC §6) at every rate while
	// nearly halving the pipeline's fixed costs against a 10 ms, 8-event
	// linger; the deliveries' accepted→received latency does not pay it.
	// (20 ms cost no less CPU at 100/s and raised a publish's p99 there
	// to 25 ms.)
	EventLinger = 15 * time.Millisecond
	EventEnough = 16
)

// maxSubscriptionRaces bounds how often a batch with events fanned out
// inline is matched and written again because the subscriptions changed
// in between (see writeEvents).
const maxSubscriptionRaces = 5

// newEvent is one call of CreateEvent (without a key) or
// CreateEventFannedOut in a group commit.
type newEvent struct {
	event domain.Event
	// inline fans the event out in the batch's transaction; nil stores it
	// unfanned, for the fan-out stage.
	inline ports.InlineFanOut
	// out receives the fan-out's outcome; the caller reads it once Commit
	// has returned.
	out *fanOutcome
}

type fanOutcome struct {
	deliveries []string
	fannedOut  bool
}

// newEventBatcher returns the group commit of events without an idempotency
// key: concurrent calls share one multi-row INSERT, so one round trip and
// one commit, instead of paying ~57 µs of commit each.
func (s *Store) newEventBatcher(writers int) *batch.Batcher[newEvent] {
	return batch.New(s.insertEvents, batch.Limits[newEvent]{
		MaxItems:  maxEventBatch,
		MaxWeight: maxEventBatchBytes,
		Weigh:     eventRowSize,
		Writers:   writers,
		Linger:    EventLinger,
		Enough:    EventEnough,
	})
}

// eventRowSize is about what a row adds to the INSERT.
func eventRowSize(n newEvent) int {
	e := n.event
	return len(e.ID) + len(e.Type) + len(e.Source) + len(e.Data) + len(e.OrderingKey) + 16
}

// insertEvents is the batch.WriteFunc of events: the whole batch,
// with the deliveries of the events fanned out inline, in one statement
// (InsertEventsFannedOut), which commits every row or none.
//
// When PostgreSQL rejects the statement because of a row's content — a
// duplicate id (already stored, or twice in the batch), or another
// integrity or data error — nothing was written, and the innocent callers must not share the
// guilty one's error: every row is then tried again on its own, so each
// caller gets the outcome of its own row, exactly as without batching. Any
// other failure (connection lost, ctx ended, server shutting down) gives
// every caller in the batch the same error; as with a single-row insert
// whose reply was lost, their rows may or may not be committed, and a
// publisher that retries gets at-least-once.
func (s *Store) insertEvents(ctx context.Context, batch []newEvent, errs []error) {
	err := s.writeEvents(ctx, batch)
	switch {
	case err == nil:
		return
	case rowRejected(err):
		for i := range batch {
			errs[i] = interpretError(s.writeEvents(ctx, batch[i:i+1]))
		}
	default:
		for i := range batch {
			errs[i] = fmt.Errorf("batch insert of %d events: %w", len(batch), interpretError(err))
		}
	}
}

// writeEvents fans out the events that ask for it against the copy of the
// active subscriptions (subscriptionCopy) and stores the batch in one statement,
// which stores nothing when the subscriptions changed since the copy was
// loaded, or one the batch delivers to was deleted meanwhile
// (InsertEventsFannedOut); the copy is then loaded again and the batch
// fanned out and written anew.
func (s *Store) writeEvents(ctx context.Context, batch []newEvent) error {
	inline := false
	for _, n := range batch {
		inline = inline || n.inline != nil
	}
	var minVersion int64 = -1
	for range maxSubscriptionRaces {
		version, rows := int64(-1), sqlcgen.InsertEventsFannedOutParams{}
		if inline {
			// Matched under the copy's read lock: the index changes in place.
			err := s.withSubscriptions(ctx, minVersion, func(v int64, c *subscriptionCopy) error {
				version, rows = v, eventRows(batch, v, c.index)
				return nil
			})
			if err != nil {
				return fmt.Errorf("load subscriptions to fan out: %w", err)
			}
		} else {
			rows = eventRows(batch, version, nil)
		}
		row, err := s.queries.InsertEventsFannedOut(ctx, rows)
		switch {
		case err != nil:
			return err
		case row.Stored == int64(len(batch)):
			return nil
		case inline && row.CurrentVersion != version:
			minVersion = row.CurrentVersion // changed meanwhile: match again
		case inline && row.MissingSubscriptions > 0:
			// Deleted after the statement's snapshot, so its counter read
			// the old version: the deletion moved it at least one further.
			minVersion = version + 1
		default:
			// A multi-row INSERT … SELECT stores every row or fails; this
			// is a broken invariant, not something a caller can act on.
			return fmt.Errorf("batch insert stored %d of %d events", row.Stored, len(batch))
		}
	}
	return fmt.Errorf("subscriptions changed during each of %d tries to store %d events", maxSubscriptionRaces, len(batch))
}

// eventRows fans out the events of batch that ask for it against active
// and returns the batch's rows, for subscriptions at version (-1 when none
// is fanned out inline).
func eventRows(batch []newEvent, version int64, active *domain.SubscriptionIndex) sqlcgen.InsertEventsFannedOutParams {
	p := sqlcgen.InsertEventsFannedOutParams{
		SubscriptionVersion:    version,
		Ids:                    make([]string, len(batch)),
		Types:                  make([]string, len(batch)),
		Sources:                make([]string, len(batch)),
		DataOffsets:            make([]int32, len(batch)),
		DataLengths:            make([]int32, len(batch)),
		OrderingKeys:           make([]string, len(batch)),
		Fanned:                 make([]bool, len(batch)),
		CreatedAts:             make([]time.Time, len(batch)),
		DeliveryIds:            []string{},
		DeliveryEventIds:       []string{},
		SubscriptionIds:        []string{},
		DeliveryOrderingKeys:   []string{},
		DeliveryCreatedAts:     []time.Time{},
		DeliveryReservedUntils: []time.Time{},
	}
	size := 0
	for _, n := range batch {
		size += len(n.event.Data)
	}
	p.DataBlob = make([]byte, 0, size) // the payloads end to end (see the query)
	for i, n := range batch {
		e := n.event
		p.DataOffsets[i], p.DataLengths[i] = int32(len(p.DataBlob)+1), int32(len(e.Data))
		p.DataBlob = append(p.DataBlob, e.Data...)
		p.Ids[i], p.Types[i], p.Sources[i] = e.ID, e.Type, e.Source
		p.OrderingKeys[i], p.CreatedAts[i] = e.OrderingKey, e.CreatedAt
		if n.inline == nil {
			continue
		}
		deliveries, ok := n.inline(e, active)
		*n.out = fanOutcome{fannedOut: ok}
		if !ok {
			continue
		}
		p.Fanned[i] = true
		for _, d := range deliveries {
			p.DeliveryIds = append(p.DeliveryIds, d.ID)
			p.DeliveryEventIds = append(p.DeliveryEventIds, e.ID)
			p.SubscriptionIds = append(p.SubscriptionIds, d.SubscriptionID)
			p.DeliveryOrderingKeys = append(p.DeliveryOrderingKeys, d.OrderingKey)
			p.DeliveryCreatedAts = append(p.DeliveryCreatedAts, storedTime(d.CreatedAt))
			p.DeliveryReservedUntils = append(p.DeliveryReservedUntils, storedTime(d.ReservedUntil))
			n.out.deliveries = append(n.out.deliveries, d.ID)
		}
	}
	return p
}

// rowRejected reports whether PostgreSQL refused a statement because of
// what a row holds: SQLSTATE class 23 (integrity constraint violation) or
// 22 (data exception). Such a statement wrote nothing, so its rows can be
// tried again one by one; other errors say nothing about any one row.
func rowRejected(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	return strings.HasPrefix(pgErr.Code, "23") || strings.HasPrefix(pgErr.Code, "22")
}
