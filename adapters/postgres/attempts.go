package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dispatch-webhooks/dispatch/adapters/postgres/sqlcgen"
	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// ClaimDelivery implements ports.DeliveryStore: one statement leases the
// delivery and reads its event and subscription, and holds back an ordered
// delivery that is not first in line. Only when nothing was claimed does a
// second statement (HoldDelivery) tell "does not exist" from "not
// claimable", and clear the enqueued mark of a held delivery.
func (s *Store) ClaimDelivery(ctx context.Context, id string, now time.Time, leaseMargin time.Duration) (ports.Claimed, error) {
	row, err := s.queries.ClaimDelivery(ctx, sqlcgen.ClaimDeliveryParams{ID: id, Now: now, LeaseMargin: interval(leaseMargin)})
	if errors.Is(err, pgx.ErrNoRows) {
		refused, err := s.queries.HoldDelivery(ctx, sqlcgen.HoldDeliveryParams{ID: id, Now: now})
		switch {
		case err != nil:
			return ports.Claimed{}, fmt.Errorf("claim delivery %s: %w", id, interpretError(err))
		case !refused.Found:
			return ports.Claimed{}, fmt.Errorf("claim delivery %s: %w", id, domain.ErrNotFound)
		case refused.Held:
			return ports.Claimed{}, fmt.Errorf("claim delivery %s: %w: held behind an earlier event with its ordering key", id, domain.ErrConflict)
		default:
			return ports.Claimed{}, fmt.Errorf("claim delivery %s: %w: terminal, not due or leased to another worker", id, domain.ErrConflict)
		}
	}
	if err != nil {
		return ports.Claimed{}, fmt.Errorf("claim delivery %s: %w", id, interpretError(err))
	}
	sub, err := toSubscription(row.Subscription)
	if err != nil {
		return ports.Claimed{}, fmt.Errorf("claim delivery %s: %w", id, err)
	}
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
		}),
		Event:        claimedEvent(row.Event),
		Subscription: sub,
	}, nil
}

// RecordAttempt implements ports.DeliveryStore. The delivery update and the
// attempt insert are one statement; a terminal outcome of an ordered
// delivery also finds the next in line (see storeOutcome).
func (s *Store) RecordAttempt(ctx context.Context, d domain.Delivery, a domain.Attempt) ([]string, error) {
	if a.DeliveryID != "" && a.DeliveryID != d.ID {
		return nil, fmt.Errorf("record attempt: attempt of delivery %s given with delivery %s", a.DeliveryID, d.ID)
	}
	params := sqlcgen.RecordAttemptParams{
		ID:               d.ID,
		Status:           string(d.Status),
		Attempts:         int32(d.Attempts),
		NextAttemptAt:    d.NextAttemptAt,
		LastStatusCode:   optionalInt(d.LastStatusCode),
		LastError:        validText(d.LastError),
		Reason:           d.Reason,
		UpdatedAt:        d.UpdatedAt,
		Attempt:          int32(a.Number),
		StatusCode:       optionalInt(a.StatusCode),
		ResponseBody:     []byte(a.ResponseBody),
		Error:            validText(a.Error),
		Duration:         interval(a.Duration),
		AttemptCreatedAt: a.CreatedAt,
	}
	next, err := s.storeOutcome(ctx, d.Status.Terminal(), func(q *sqlcgen.Queries) (outcomeRow, error) {
		row, err := q.RecordAttempt(ctx, params)
		return outcomeRow(row), err
	})
	if err != nil {
		return nil, fmt.Errorf("record attempt %d of delivery %s: %w", a.Number, d.ID, interpretError(err))
	}
	return next, nil
}

// outcomeRow is what the statements that store a delivery's new state
// (RecordAttempt, ReleaseDelivery) return: the stored row's event,
// subscription and ordering key, not the caller's copies.
type outcomeRow struct {
	EventID        string
	SubscriptionID string
	OrderingKey    string
}

// storeOutcome runs write, one statement that stores a delivery's new state
// and commits on its own. A terminal ordered delivery lets the next of its
// key go: a second statement (NextInLine), run after the first committed,
// returns it if it is now first in line. Unordered deliveries, most of
// them, never run it; nor does anything settle the event, whose status is
// derived from its deliveries when it is read.
func (s *Store) storeOutcome(ctx context.Context, terminal bool, write func(q *sqlcgen.Queries) (outcomeRow, error)) (next []string, err error) {
	row, err := write(s.queries)
	if err != nil || !terminal || row.OrderingKey == "" {
		return nil, err
	}
	next, err = s.queries.NextInLine(ctx, sqlcgen.NextInLineParams{SubscriptionID: row.SubscriptionID, OrderingKey: row.OrderingKey})
	if err != nil || len(next) == 0 {
		// The outcome is stored. A lost lookup costs the next in line only
		// latency: its enqueued mark was cleared when it was held, so the
		// scheduler's next scan enqueues it.
		return nil, nil
	}
	return next, nil
}

// ReleaseDelivery implements ports.DeliveryStore: one statement, and for a
// settlement of an ordered delivery the next in line, as in RecordAttempt.
func (s *Store) ReleaseDelivery(ctx context.Context, d domain.Delivery) ([]string, error) {
	params := sqlcgen.ReleaseDeliveryParams{
		ID:            d.ID,
		Status:        string(d.Status),
		NextAttemptAt: d.NextAttemptAt,
		Reason:        d.Reason,
		LastError:     validText(d.LastError),
		UpdatedAt:     d.UpdatedAt,
	}
	next, err := s.storeOutcome(ctx, d.Status.Terminal(), func(q *sqlcgen.Queries) (outcomeRow, error) {
		row, err := q.ReleaseDelivery(ctx, params)
		return outcomeRow(row), err
	})
	if err != nil {
		return nil, fmt.Errorf("release delivery %s: %w", d.ID, interpretError(err))
	}
	return next, nil
}
