package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/dispatch-webhooks/dispatch/domain"
)

// EventsWaiting returns how many CreateEvent calls wait for their event to
// be taken into a group commit, so tests can line callers up.
func EventsWaiting(s *Store) int {
	return s.events.Waiting()
}

// OneEventWriter makes s write one batch of events at a time, so that tests
// can hold a batch and line callers up behind it.
func OneEventWriter(s *Store) *Store {
	s.events = s.newEventBatcher(1)
	return s
}

// EventWriters is how many batches of events are written at once.
const EventWriters = eventWriters

// CopySubscriptions stores subs with one COPY, rows made as
// CreateSubscription makes them, for tests that need very many.
func CopySubscriptions(ctx context.Context, s *Store, subs []domain.Subscription) error {
	rows := make([][]any, len(subs))
	for i, sub := range subs {
		r, err := subscriptionRow(s.ring, sub)
		if err != nil {
			return err
		}
		rows[i] = []any{r.ID, r.Url, r.EventTypes, r.Description, r.Secret, r.PreviousSecret,
			r.PreviousSecretExpiresAt, r.Active, r.DisabledReason, r.RateLimit, r.MaxInFlight,
			r.Timeout, r.RetryPolicy, r.OrderingKey, r.Headers, r.CreatedAt, r.UpdatedAt}
	}
	_, err := s.pool.CopyFrom(ctx, pgx.Identifier{"subscriptions"}, []string{
		"id", "url", "event_types", "description", "secret", "previous_secret",
		"previous_secret_expires_at", "active", "disabled_reason", "rate_limit", "max_in_flight",
		"timeout", "retry_policy", "ordering_key", "headers", "created_at", "updated_at",
	}, pgx.CopyFromRows(rows))
	return err
}

// MaintenanceLockKey is the advisory lock MaintainHistory takes.
const MaintenanceLockKey = maintenanceLockKey
