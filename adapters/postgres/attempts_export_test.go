package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// ClaimsWaiting and AttemptsWaiting return how many ClaimDelivery and
// RecordAttempt calls wait for a group commit, so tests can line callers
// up.
func ClaimsWaiting(s *Store) int   { return s.workers().claims.Waiting() }
func AttemptsWaiting(s *Store) int { return s.workers().attempts.Waiting() }

// ClaimDeliveryAlone and RecordAttemptAlone are ClaimDelivery and
// RecordAttempt with a statement of their own (a batch of one), as before
// group commit, for the benchmarks to compare with.
func ClaimDeliveryAlone(ctx context.Context, s *Store, id string, now time.Time, leaseMargin time.Duration) (ports.Claimed, error) {
	return s.claimAlone(ctx, id, now, leaseMargin)
}

func RecordAttemptAlone(ctx context.Context, s *Store, d domain.Delivery, a domain.Attempt) ([]string, error) {
	return s.recordAlone(ctx, d, a)
}

// RecordAttemptsInOne records every outcome in one RecordAttempts
// statement, as a group commit of len(ds) calls does, for the benchmarks.
func RecordAttemptsInOne(ctx context.Context, s *Store, ds []domain.Delivery, as []domain.Attempt) error {
	batch := make([]*outcomeCall[attemptWrite], len(ds))
	for i, d := range ds {
		batch[i] = &outcomeCall[attemptWrite]{id: d.ID, params: newAttemptWrite(d, as[i])}
	}
	errs := make([]error, len(batch))
	s.recordAttempts(ctx, batch, errs)
	return errors.Join(errs...)
}

// ClaimDeliveriesInOne claims every delivery of ds in one group commit's
// batch, as len(ds) concurrent calls do, for the benchmarks: in one
// ClaimDeliveries statement, or, when fresh, as TakeDelivery's calls with
// ds as their entries tell them (takeUnread, and ClaimDeliveries for
// what it leaves).
func ClaimDeliveriesInOne(ctx context.Context, s *Store, ds []domain.Delivery, now time.Time, leaseMargin time.Duration, fresh bool) error {
	batch := make([]*claimCall, len(ds))
	for i, d := range ds {
		batch[i] = &claimCall{id: d.ID, now: now, leaseMargin: leaseMargin, fresh: fresh}
		if fresh {
			batch[i].entry = d
		}
	}
	errs := make([]error, len(batch))
	s.claimDeliveries(ctx, batch, errs)
	for _, c := range batch {
		if c.claimed == nil && c.taken == nil {
			errs = append(errs, fmt.Errorf("delivery %s not claimed", c.id))
		}
	}
	return errors.Join(errs...)
}
