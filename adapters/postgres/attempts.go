package postgres

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/dispatch-webhooks/dispatch/adapters/postgres/sqlcgen"
	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/internal/batch"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// The worker's statements — claim, record an attempt, release — are
// group-committed like CreateEvent's inserts: each worker goroutine makes
// one call per delivery, and concurrent calls of one kind share one
// statement (ClaimDeliveries, RecordAttempts, ReleaseDeliveries), so one
// round trip and one commit per batch instead of per delivery. Per-call
// overhead (parse/bind/execute, commit, a backend wake-up), not the rows'
// work, is what capped the worker on a busy 2-core box.
//
// Each caller still gets its own outcome, exactly as with a statement of
// its own: rows are matched back to callers by delivery id, a delivery
// named twice in one batch is sent once (the later calls see the first
// one's effect, as if they had come after it), and a statement PostgreSQL
// rejects for one row's content is written again row by row (see
// writeOutcomes). A caller whose ctx ends while it waits for its batch
// returns ctx's error at once; as with CreateEvent, its row may still be
// written if its batch was already under way.

// workerBatchers are a Store's group commits of the worker's statements.
type workerBatchers struct {
	claims   *batch.Batcher[*claimCall]
	attempts *batch.Batcher[*outcomeCall[attemptWrite]]
	releases *batch.Batcher[*outcomeCall[releaseWrite]]
}

// Attempt records linger for company as every stage after an endpoint's
// answer does (domain.AfterAnswerLinger): nobody waits on the record but
// the worker's handler and, for an ordered delivery, the next one in line.
// So a terminal outcome of an ordered delivery does not wait (urgent): its
// key's next delivery waits on it.
// nextWaitsOn says the next delivery in line waits on d's record: d is
// ordered and its outcome terminal (see nextInLine).
func nextWaitsOn(d domain.Delivery) bool {
	return d.OrderingKey != "" && d.Status.Terminal()
}

// newWorkerBatchers makes s's group commits of the worker's statements
// (New calls it, like the events batcher).
func (s *Store) newWorkerBatchers() workerBatchers {
	return workerBatchers{
		claims: batch.New(s.claimDeliveries, batch.Limits[*claimCall]{}),
		attempts: batch.New(s.recordAttempts, batch.Limits[*outcomeCall[attemptWrite]]{
			Linger: domain.AfterAnswerLinger, Enough: domain.AfterAnswerEnough,
			Urgent: func(c *outcomeCall[attemptWrite]) bool { return c.urgent },
		}),
		releases: batch.New(s.releaseDeliveries, batch.Limits[*outcomeCall[releaseWrite]]{}),
	}
}

// workers returns s's group commits of the worker's statements.
func (s *Store) workers() *workerBatchers { return &s.worker }

// claimCall is one ClaimDelivery in a group commit.
type claimCall struct {
	id          string
	now         time.Time
	leaseMargin time.Duration
	// fresh says the caller holds the delivery's creator's queue entry
	// (TakeDelivery), and entry is what that entry tells of it.
	fresh bool
	entry domain.Delivery
	// claimed is the claimed (or taken) row; nil when the delivery was not
	// claimed. taken is a take answered without a read (takeUnread).
	// The caller reads them once Commit has returned.
	claimed *sqlcgen.ClaimDeliveriesRow
	taken   *ports.Claimed
}

// ClaimDelivery implements ports.DeliveryClaims. Concurrent claims are
// group-committed: one statement (ClaimDeliveries) leases every delivery
// of the batch that can be claimed and reads its event and subscription.
// Only when a delivery was not claimed does a second statement of the
// caller's own (HoldDelivery) tell "does not exist" from "not claimable",
// and clear the enqueued mark of a held delivery. Of two calls for one
// delivery in a batch, the later is not claimed: the earlier leased it.
func (s *Store) ClaimDelivery(ctx context.Context, id string, now time.Time, leaseMargin time.Duration) (ports.Claimed, error) {
	return s.commitClaim(ctx, &claimCall{id: id, now: now, leaseMargin: leaseMargin})
}

// TakeDelivery implements ports.DeliveryClaims: a claim with the fresh flag
// in the same group commit, answered from fresh without a read of the row
// when it can be (takeUnread), and otherwise by ClaimDeliveries, where a
// take whose reservation is long enough writes nothing either.
func (s *Store) TakeDelivery(ctx context.Context, fresh domain.Delivery, now time.Time, leaseMargin time.Duration) (ports.Claimed, error) {
	return s.commitClaim(ctx, &claimCall{id: fresh.ID, now: now, leaseMargin: leaseMargin, fresh: true, entry: fresh})
}

func (s *Store) commitClaim(ctx context.Context, c *claimCall) (ports.Claimed, error) {
	if err := s.workers().claims.Commit(ctx, c); err != nil {
		return ports.Claimed{}, fmt.Errorf("claim delivery %s: %w", c.id, err)
	}
	if c.taken != nil {
		return *c.taken, nil
	}
	if c.claimed == nil {
		return ports.Claimed{}, s.notClaimed(ctx, c.id, c.now)
	}
	return s.toClaimed(*c.claimed)
}

// claimAlone is ClaimDelivery without a group commit: a batch of one, in a
// statement of its own, for the benchmarks to compare with.
func (s *Store) claimAlone(ctx context.Context, id string, now time.Time, leaseMargin time.Duration) (ports.Claimed, error) {
	c := &claimCall{id: id, now: now, leaseMargin: leaseMargin}
	errs := make([]error, 1)
	s.claimDeliveries(ctx, []*claimCall{c}, errs)
	if errs[0] != nil {
		return ports.Claimed{}, fmt.Errorf("claim delivery %s: %w", id, errs[0])
	}
	if c.claimed == nil {
		return ports.Claimed{}, s.notClaimed(ctx, id, now)
	}
	return s.toClaimed(*c.claimed)
}

// notClaimed says why delivery id was not claimed (HoldDelivery), holding
// it back if ordering was the only obstacle.
func (s *Store) notClaimed(ctx context.Context, id string, now time.Time) error {
	refused, err := s.queries.HoldDelivery(ctx, sqlcgen.HoldDeliveryParams{ID: id, Now: now})
	switch {
	case err != nil:
		return fmt.Errorf("claim delivery %s: %w", id, interpretError(err))
	case !refused.Found:
		return fmt.Errorf("claim delivery %s: %w", id, domain.ErrNotFound)
	case refused.Held:
		return fmt.Errorf("claim delivery %s: %w: held behind an earlier event with its ordering key", id, domain.ErrConflict)
	default:
		return fmt.Errorf("claim delivery %s: %w: terminal, not due, or leased or reserved to another worker", id, domain.ErrConflict)
	}
}

// toClaimed converts a claimed row, its subscription through the memo of
// decoded subscriptions.
func (s *Store) toClaimed(row sqlcgen.ClaimDeliveriesRow) (ports.Claimed, error) {
	sub, err := s.decoded.subscription(s.ring, row.Subscription)
	if err != nil {
		return ports.Claimed{}, fmt.Errorf("claim delivery %s: %w", row.ID, err)
	}
	s.subscriptions.rememberClaimed(row.Subscription.Version, sub)
	return ports.Claimed{
		Delivery: toDelivery(sqlcgen.Delivery{
			ID:             row.ID,
			EventID:        row.EventID,
			SubscriptionID: row.SubscriptionID,
			Status:         row.Status,
			Attempts:       row.Attempts,
			NextAttemptAt:  row.NextAttemptAt,
			LastStatusCode: row.LastStatusCode,
			LastError:      row.LastError,
			Reason:         row.Reason,
			OrderingKey:    row.OrderingKey,
			CreatedAt:      row.CreatedAt,
			UpdatedAt:      row.UpdatedAt,
			LeaseUntil:     row.LeaseUntil,
		}),
		Event:        claimedEvent(row.Event),
		Subscription: sub,
	}, nil
}

// claimDeliveries is the batch.WriteFunc of claims: one
// ClaimDeliveries statement for the batch, each delivery named once (the
// first call for it gets the claim). A statement rejected for a row's
// content (SQLSTATE class 22 or 23, say a lease beyond the timestamp
// range) wrote nothing and is written again row by row, so only the
// guilty caller fails; any other failure is every caller's.
func (s *Store) claimDeliveries(ctx context.Context, batch []*claimCall, errs []error) {
	left := s.takeUnread(ctx, batch)
	if len(left) == 0 {
		return
	}
	first := make(map[string]*claimCall, len(left))
	for _, i := range left {
		if c := batch[i]; first[c.id] == nil {
			first[c.id] = c
		}
	}
	err := s.claim(ctx, first)
	switch {
	case err == nil:
	case rowRejected(err) && len(first) > 1:
		// Each on its own, so that only the guilty caller gets the error.
		for _, i := range left {
			if c := batch[i]; first[c.id] == c {
				errs[i] = interpretError(s.claim(ctx, map[string]*claimCall{c.id: c}))
			}
		}
	default:
		for _, i := range left {
			errs[i] = fmt.Errorf("batch claim of %d deliveries: %w", len(first), interpretError(err))
		}
	}
}

// claim runs ClaimDeliveries for calls, one per delivery id, and hands each
// claimed row to its call.
func (s *Store) claim(ctx context.Context, calls map[string]*claimCall) error {
	// In id order: the order the statement locks rows in.
	ids := slices.Sorted(maps.Keys(calls))
	p := sqlcgen.ClaimDeliveriesParams{
		Ids:          ids,
		Nows:         make([]time.Time, len(ids)),
		LeaseMargins: make([]pgtype.Interval, len(ids)),
		Fresh:        make([]bool, len(ids)),
	}
	for i, id := range ids {
		c := calls[id]
		p.Nows[i], p.LeaseMargins[i], p.Fresh[i] = c.now, interval(c.leaseMargin), c.fresh
	}
	rows, err := retryDeadlock(func() ([]sqlcgen.ClaimDeliveriesRow, error) { return s.batch.ClaimDeliveries(ctx, p) })
	for _, row := range rows {
		claimed := row
		calls[row.ID].claimed = &claimed
	}
	return err
}

// RecordAttempt implements ports.DeliveryClaims. Concurrent calls are
// group-committed: one statement (RecordAttempts) stores every delivery's
// new state and attempt of the batch. An attempt that exists already (a
// worker whose lease expired, fenced by the attempts primary key) rejects
// the whole statement, which is then written again row by row, so that
// only its caller gets domain.ErrConflict. A terminal outcome of an
// ordered delivery also finds the next in line (see nextInLine).
func (s *Store) RecordAttempt(ctx context.Context, d domain.Delivery, a domain.Attempt) ([]string, error) {
	if a.DeliveryID != "" && a.DeliveryID != d.ID {
		return nil, fmt.Errorf("record attempt: attempt of delivery %s given with delivery %s", a.DeliveryID, d.ID)
	}
	c := &outcomeCall[attemptWrite]{id: d.ID, params: newAttemptWrite(d, a), urgent: nextWaitsOn(d)}
	if err := s.workers().attempts.Commit(ctx, c); err != nil {
		return nil, fmt.Errorf("record attempt %d of delivery %s: %w", a.Number, d.ID, err)
	}
	return s.nextInLine(ctx, d.Status.Terminal(), c.stored), nil
}

// recordAlone is RecordAttempt without a group commit: a batch of one, in
// a statement of its own, for the benchmarks to compare with.
func (s *Store) recordAlone(ctx context.Context, d domain.Delivery, a domain.Attempt) ([]string, error) {
	c := &outcomeCall[attemptWrite]{id: d.ID, params: newAttemptWrite(d, a)}
	errs := make([]error, 1)
	s.recordAttempts(ctx, []*outcomeCall[attemptWrite]{c}, errs)
	if errs[0] != nil {
		return nil, fmt.Errorf("record attempt %d of delivery %s: %w", a.Number, d.ID, errs[0])
	}
	return s.nextInLine(ctx, d.Status.Terminal(), c.stored), nil
}

// attemptWrite is one RecordAttempt's row of RecordAttempts. Status codes
// of 0 store NULL (no response).
type attemptWrite struct {
	ID               string
	Status           string
	Attempts         int32
	NextAttemptAt    time.Time
	LastStatusCode   int32
	LastError        string
	Reason           string
	UpdatedAt        time.Time
	Attempt          int32
	StatusCode       int32
	ResponseBody     []byte
	Error            string
	Duration         pgtype.Interval
	AttemptCreatedAt time.Time
}

func newAttemptWrite(d domain.Delivery, a domain.Attempt) attemptWrite {
	return attemptWrite{
		ID:               d.ID,
		Status:           string(d.Status),
		Attempts:         int32(d.Attempts),
		NextAttemptAt:    d.NextAttemptAt,
		LastStatusCode:   int32(d.LastStatusCode),
		LastError:        validText(d.LastError),
		Reason:           d.Reason,
		UpdatedAt:        d.UpdatedAt,
		Attempt:          int32(a.Number),
		StatusCode:       int32(a.StatusCode),
		ResponseBody:     nonNil([]byte(a.ResponseBody)),
		Error:            validText(a.Error),
		Duration:         interval(a.Duration),
		AttemptCreatedAt: a.CreatedAt,
	}
}

// recordAttempts is the batch.WriteFunc of RecordAttempt.
func (s *Store) recordAttempts(ctx context.Context, batch []*outcomeCall[attemptWrite], errs []error) {
	writeOutcomes(ctx, batch, errs, "record", func(ctx context.Context, ps []attemptWrite) (map[string]outcomeRow, error) {
		p := sqlcgen.RecordAttemptsParams{
			Ids:               make([]string, len(ps)),
			Statuses:          make([]string, len(ps)),
			Attempts:          make([]int32, len(ps)),
			NextAttemptAts:    make([]time.Time, len(ps)),
			LastStatusCodes:   make([]int32, len(ps)),
			LastErrors:        make([]string, len(ps)),
			Reasons:           make([]string, len(ps)),
			UpdatedAts:        make([]time.Time, len(ps)),
			AttemptNumbers:    make([]int32, len(ps)),
			StatusCodes:       make([]int32, len(ps)),
			ResponseBodies:    make([][]byte, len(ps)),
			Errors:            make([]string, len(ps)),
			Durations:         make([]pgtype.Interval, len(ps)),
			AttemptCreatedAts: make([]time.Time, len(ps)),
		}
		for i, r := range ps {
			p.Ids[i], p.Statuses[i], p.Attempts[i] = r.ID, r.Status, r.Attempts
			p.NextAttemptAts[i], p.LastErrors[i], p.Reasons[i] = r.NextAttemptAt, r.LastError, r.Reason
			p.LastStatusCodes[i], p.StatusCodes[i] = r.LastStatusCode, r.StatusCode
			p.UpdatedAts[i], p.AttemptNumbers[i] = r.UpdatedAt, r.Attempt
			p.ResponseBodies[i], p.Errors[i] = r.ResponseBody, r.Error
			p.Durations[i], p.AttemptCreatedAts[i] = r.Duration, r.AttemptCreatedAt
		}
		rows, err := s.batch.RecordAttempts(ctx, p)
		if err != nil {
			return nil, err
		}
		stored := make(map[string]outcomeRow, len(rows))
		for _, row := range rows {
			stored[row.ID] = outcomeRow{EventID: row.EventID, SubscriptionID: row.SubscriptionID, OrderingKey: row.OrderingKey}
		}
		return stored, nil
	})
}

// ReleaseDelivery implements ports.DeliveryClaims, group-committed like
// RecordAttempt (one ReleaseDeliveries statement per batch), and for a
// settlement of an ordered delivery the next in line, as in RecordAttempt.
func (s *Store) ReleaseDelivery(ctx context.Context, d domain.Delivery) ([]string, error) {
	c := &outcomeCall[releaseWrite]{id: d.ID, params: releaseWrite{
		ID:            d.ID,
		Status:        string(d.Status),
		NextAttemptAt: d.NextAttemptAt,
		Reason:        d.Reason,
		LastError:     validText(d.LastError),
		UpdatedAt:     d.UpdatedAt,
	}}
	if err := s.workers().releases.Commit(ctx, c); err != nil {
		return nil, fmt.Errorf("release delivery %s: %w", d.ID, err)
	}
	return s.nextInLine(ctx, d.Status.Terminal(), c.stored), nil
}

// releaseWrite is one ReleaseDelivery's row of ReleaseDeliveries.
type releaseWrite struct {
	ID            string
	Status        string
	NextAttemptAt time.Time
	Reason        string
	LastError     string
	UpdatedAt     time.Time
}

// releaseDeliveries is the batch.WriteFunc of ReleaseDelivery.
func (s *Store) releaseDeliveries(ctx context.Context, batch []*outcomeCall[releaseWrite], errs []error) {
	writeOutcomes(ctx, batch, errs, "release", func(ctx context.Context, ps []releaseWrite) (map[string]outcomeRow, error) {
		p := sqlcgen.ReleaseDeliveriesParams{
			Ids:            make([]string, len(ps)),
			Statuses:       make([]string, len(ps)),
			NextAttemptAts: make([]time.Time, len(ps)),
			Reasons:        make([]string, len(ps)),
			LastErrors:     make([]string, len(ps)),
			UpdatedAts:     make([]time.Time, len(ps)),
		}
		for i, r := range ps {
			p.Ids[i], p.Statuses[i], p.NextAttemptAts[i] = r.ID, r.Status, r.NextAttemptAt
			p.Reasons[i], p.LastErrors[i], p.UpdatedAts[i] = r.Reason, r.LastError, r.UpdatedAt
		}
		rows, err := s.batch.ReleaseDeliveries(ctx, p)
		if err != nil {
			return nil, err
		}
		stored := make(map[string]outcomeRow, len(rows))
		for _, row := range rows {
			stored[row.ID] = outcomeRow{EventID: row.EventID, SubscriptionID: row.SubscriptionID, OrderingKey: row.OrderingKey}
		}
		return stored, nil
	})
}

// outcomeCall is one RecordAttempt or ReleaseDelivery in a group commit:
// the new state of delivery id, as its row of the batch statement.
type outcomeCall[P any] struct {
	id     string
	params P
	// urgent says the next delivery in line waits on this one's outcome
	// (batch.Limits.Urgent).
	urgent bool
	// stored is what the statement returned; the caller reads it once
	// Commit has returned without an error.
	stored outcomeRow
}

// outcomeRow is what the statements that store a delivery's new state
// (RecordAttempts, ReleaseDeliveries) return: the stored
// row's event, subscription and ordering key, not the caller's copies.
type outcomeRow struct {
	EventID        string
	SubscriptionID string
	OrderingKey    string
}

// writeOutcomes writes a batch of outcomes: the first call for each
// delivery in one statement (many, which returns the stored rows by
// delivery id and leaves out deliveries that do not exist), then any later
// call for a delivery already in the batch on its own (many with one row),
// after the first, as if it had come in the next batch.
//
// When PostgreSQL rejects the statement because of a row's content
// (rowRejected: an attempt that exists already, a value out of range),
// nothing was written and the innocent callers must not share the guilty
// one's error: every call is then written on its own, in batch order, so
// each gets the outcome of its own row, exactly as without batching. Any
// other failure (connection lost, ctx ended) gives the statement's callers
// the same error; their rows may or may not be committed, as with a
// single-row statement whose reply was lost.
func writeOutcomes[P any](
	ctx context.Context, batch []*outcomeCall[P], errs []error, what string,
	many func(context.Context, []P) (map[string]outcomeRow, error),
) {
	var firsts, alone []int
	named := make(map[string]bool, len(batch))
	for i, c := range batch {
		if named[c.id] {
			alone = append(alone, i)
			continue
		}
		named[c.id] = true
		firsts = append(firsts, i)
	}
	// In id order: the order the statement locks rows in.
	slices.SortFunc(firsts, func(i, j int) int { return strings.Compare(batch[i].id, batch[j].id) })
	params := make([]P, len(firsts))
	for j, i := range firsts {
		params[j] = batch[i].params
	}
	stored, err := retryDeadlock(func() (map[string]outcomeRow, error) { return many(ctx, params) })
	switch {
	case err == nil:
		for _, i := range firsts {
			row, ok := stored[batch[i].id]
			if !ok {
				errs[i] = domain.ErrNotFound
				continue
			}
			batch[i].stored = row
		}
	case rowRejected(err):
		alone = append(alone, firsts...)
		slices.Sort(alone)
	default:
		for _, i := range firsts {
			errs[i] = fmt.Errorf("batch %s of %d deliveries: %w", what, len(firsts), interpretError(err))
		}
	}
	for _, i := range alone {
		stored, err := many(ctx, []P{batch[i].params})
		row, ok := stored[batch[i].id]
		switch {
		case err != nil:
			errs[i] = interpretError(err)
		case !ok:
			errs[i] = domain.ErrNotFound
		default:
			batch[i].stored = row
		}
	}
}

// maxDeadlockRetries bounds how often a batch is written again after
// PostgreSQL aborted it to break a deadlock.
const maxDeadlockRetries = 3

// retryDeadlock runs write again when PostgreSQL aborted it to break a
// deadlock (SQLSTATE 40P01), which rolled the whole statement back, so
// nothing of it was written. The batch statements lock their rows in id
// order with the plans PostgreSQL picks for them, so this takes a plan
// that does not; the other transaction of the cycle has gone on meanwhile.
func retryDeadlock[R any](write func() (R, error)) (R, error) {
	for range maxDeadlockRetries {
		r, err := write()
		if !isDeadlock(err) {
			return r, err
		}
	}
	return write()
}

func isDeadlock(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == deadlockDetected
}

// deadlockDetected is the SQLSTATE of a statement aborted to break a
// deadlock.
const deadlockDetected = "40P01"

// nextInLine lets the next delivery of an ordered delivery's key go once
// the delivery is terminal: a statement (NextInLine), run after the outcome
// committed, returns it if it is now first in line. Unordered deliveries,
// most of them, never run it; nor does anything settle the event, whose
// status is derived from its deliveries when it is read.
func (s *Store) nextInLine(ctx context.Context, terminal bool, row outcomeRow) []string {
	if !terminal || row.OrderingKey == "" {
		return nil
	}
	next, err := s.queries.NextInLine(ctx, sqlcgen.NextInLineParams{SubscriptionID: row.SubscriptionID, OrderingKey: row.OrderingKey})
	if err != nil || len(next) == 0 {
		// The outcome is stored. A lost lookup costs the next in line only
		// latency: its enqueued mark was cleared when it was held, so the
		// scheduler's next scan enqueues it.
		return nil
	}
	return next
}
