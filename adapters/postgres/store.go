package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dispatch-webhooks/dispatch/adapters/groupcommit"
	"github.com/dispatch-webhooks/dispatch/adapters/postgres/sqlcgen"
	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

var _ ports.Store = (*Store)(nil)

// Store is ports.Store on PostgreSQL. It is safe for concurrent use; every
// method is one statement or one short transaction, so any number of
// replicas can share the database.
type Store struct {
	pool    *pgxpool.Pool
	queries *sqlcgen.Queries
	// planned runs queries whose best plan depends on their parameter
	// values (ListDeliveries' optional filters) or on the size of tables
	// that grow from empty (fan-out and the scheduler's scans); see
	// unprepared.
	planned *sqlcgen.Queries
	// batch runs the worker's group-committed statements (ClaimDeliveries,
	// RecordAttempts, ReleaseDeliveries): prepared on a BatchPool when the
	// Store has one, else planned per batch like planned.
	batch *sqlcgen.Queries
	// batchPool is the pool batch runs on, nil without a BatchPool.
	batchPool *pgxpool.Pool
	// events group-commits events without an idempotency key; see
	// CreateEvent.
	events *groupcommit.Batcher[newEvent]
	// subscriptions is the copy of the active subscriptions inline
	// fan-out matches events against, and takes find theirs in.
	subscriptions subscriptionCopy
	// worker group-commits claims, attempts and releases; see
	// ClaimDelivery and RecordAttempt.
	worker workerBatchers
	// decoded spares claims decoding the same subscription row again.
	decoded decodedSubscriptions
	// recent holds the events takes read lately (see takeUnread).
	recent recentEvents
}

// New returns a Store on pool. The schema must be migrated (Migrate).
func New(pool *pgxpool.Pool, opts ...Option) *Store {
	s := &Store{pool: pool, queries: sqlcgen.New(pool), planned: sqlcgen.New(newUnprepared(pool))}
	s.batch = s.planned
	for _, opt := range opts {
		opt(s)
	}
	s.events = s.newEventBatcher(eventWriters)
	s.worker = s.newWorkerBatchers()
	return s
}

// Option tunes New.
type Option func(*Store)

// BatchPool runs the worker's group-committed statements on pool, a pool
// from ConnectBatches, as prepared statements whose plans are made once
// per connection. Without it they are planned for every batch, which
// costs PostgreSQL several times what running them does. The caller
// closes pool, after the Store's last use.
func BatchPool(pool *pgxpool.Pool) Option {
	return func(s *Store) { s.batch, s.batchPool = sqlcgen.New(pool), pool }
}

// Ping reports whether PostgreSQL answers.
func (s *Store) Ping(ctx context.Context) error {
	return s.pool.Ping(ctx)
}

// inTx runs fn in a transaction, committing when it returns nil.
func (s *Store) inTx(ctx context.Context, fn func(q *sqlcgen.Queries) error) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		return fn(s.queries.WithTx(tx))
	})
}

// CreateSubscription implements ports.SubscriptionStore.
func (s *Store) CreateSubscription(ctx context.Context, sub domain.Subscription) error {
	row, err := subscriptionRow(sub)
	if err != nil {
		return fmt.Errorf("create subscription %s: %w", sub.ID, err)
	}
	err = s.queries.CreateSubscription(ctx, sqlcgen.CreateSubscriptionParams{
		ID:                      row.ID,
		Url:                     row.Url,
		EventTypes:              row.EventTypes,
		Description:             row.Description,
		Secret:                  row.Secret,
		PreviousSecret:          row.PreviousSecret,
		PreviousSecretExpiresAt: row.PreviousSecretExpiresAt,
		Active:                  row.Active,
		DisabledReason:          row.DisabledReason,
		RateLimit:               row.RateLimit,
		MaxInFlight:             row.MaxInFlight,
		Timeout:                 row.Timeout,
		RetryPolicy:             row.RetryPolicy,
		OrderingKey:             row.OrderingKey,
		Headers:                 row.Headers,
		CreatedAt:               row.CreatedAt,
		UpdatedAt:               row.UpdatedAt,
	})
	if err != nil {
		return fmt.Errorf("create subscription %s: %w", sub.ID, interpretError(err))
	}
	return nil
}

// GetSubscription implements ports.SubscriptionStore.
func (s *Store) GetSubscription(ctx context.Context, id string) (domain.Subscription, error) {
	row, err := s.queries.GetSubscription(ctx, id)
	if err != nil {
		return domain.Subscription{}, fmt.Errorf("get subscription %s: %w", id, interpretError(err))
	}
	return toSubscription(row)
}

// ListSubscriptions implements ports.SubscriptionStore.
func (s *Store) ListSubscriptions(ctx context.Context, p ports.Page) ([]domain.Subscription, error) {
	if p.Limit < 1 {
		return nil, fmt.Errorf("list subscriptions: limit must be at least 1, got %d", p.Limit)
	}
	rows, err := s.queries.ListSubscriptions(ctx, sqlcgen.ListSubscriptionsParams{After: p.After, MaxRows: int32(p.Limit)})
	if err != nil {
		return nil, fmt.Errorf("list subscriptions: %w", interpretError(err))
	}
	return toSubscriptions(rows)
}

// ActiveSubscriptions implements ports.SubscriptionStore.
func (s *Store) ActiveSubscriptions(ctx context.Context) ([]domain.Subscription, error) {
	rows, err := s.queries.ActiveSubscriptions(ctx)
	if err != nil {
		return nil, fmt.Errorf("list active subscriptions: %w", interpretError(err))
	}
	return toSubscriptions(rows)
}

// UpdateSubscription implements ports.SubscriptionStore. The row stays
// locked (SELECT … FOR UPDATE) from load to store, so concurrent updates of
// one subscription apply one after the other and none is lost; an error from
// update rolls the transaction back.
func (s *Store) UpdateSubscription(ctx context.Context, id string, update func(*domain.Subscription) error) (domain.Subscription, error) {
	var updated domain.Subscription
	err := s.inTx(ctx, func(q *sqlcgen.Queries) error {
		current, err := q.GetSubscriptionForUpdate(ctx, id)
		if err != nil {
			return interpretError(err)
		}
		sub, err := toSubscription(current)
		if err != nil {
			return err
		}
		if err := update(&sub); err != nil {
			return err
		}
		// The id is the row's identity, not something an update may change.
		sub.ID = id
		row, err := subscriptionRow(sub)
		if err != nil {
			return err
		}
		err = q.UpdateSubscription(ctx, sqlcgen.UpdateSubscriptionParams{
			ID:                      row.ID,
			Url:                     row.Url,
			EventTypes:              row.EventTypes,
			Description:             row.Description,
			Secret:                  row.Secret,
			PreviousSecret:          row.PreviousSecret,
			PreviousSecretExpiresAt: row.PreviousSecretExpiresAt,
			Active:                  row.Active,
			DisabledReason:          row.DisabledReason,
			RateLimit:               row.RateLimit,
			MaxInFlight:             row.MaxInFlight,
			Timeout:                 row.Timeout,
			RetryPolicy:             row.RetryPolicy,
			OrderingKey:             row.OrderingKey,
			Headers:                 row.Headers,
			UpdatedAt:               row.UpdatedAt,
		})
		if err != nil {
			return interpretError(err)
		}
		// Return what a later read returns: created_at is not updatable.
		row.CreatedAt = current.CreatedAt
		updated, err = toSubscription(row)
		return err
	})
	if err != nil {
		return domain.Subscription{}, fmt.Errorf("update subscription %s: %w", id, err)
	}
	return updated, nil
}

// DeleteSubscription implements ports.SubscriptionStore in one transaction:
// it locks the subscription (so a fan-out inserting deliveries to it
// finishes first, and later ones fail), then its deliveries (so a record of
// an attempt in flight commits first, and later ones store nothing), then
// deletes it with its deliveries and their attempts. The events that lost a
// delivery need nothing: their status is derived from the deliveries left.
func (s *Store) DeleteSubscription(ctx context.Context, id string) error {
	err := s.inTx(ctx, func(q *sqlcgen.Queries) error {
		if _, err := q.LockSubscription(ctx, id); err != nil {
			return interpretError(err)
		}
		if err := q.LockSubscriptionDeliveries(ctx, id); err != nil {
			return interpretError(err)
		}
		return interpretError(q.DeleteSubscription(ctx, id))
	})
	if err != nil {
		return fmt.Errorf("delete subscription %s: %w", id, err)
	}
	return nil
}

// maxIdempotencyRounds bounds CreateEvent's insert-or-find loop. Each round
// that does not finish means another caller changed the key's owner in
// between, which takes a pathological race to repeat.
const maxIdempotencyRounds = 10

// CreateEvent implements ports.EventStore.
//
// Without a key, concurrent calls are group-committed: their events are
// stored by one multi-row INSERT, one round trip and one commit for up to
// maxEventBatch callers (see newEventBatcher and insertEvents), and each
// call returns once the transaction holding its row has committed, or with
// that row's error. If ctx ends while the event waits for a batch, the call
// returns ctx's error at once and the event is not stored. If ctx ends while
// its batch is being written, the call returns ctx's error at once too, but
// the batch goes on for the other callers and the event may be committed
// all the same: it is then durable without having been appended to the
// event stream, which the scheduler's outbox sweep (UnfannedEvents) makes
// up for, as after a crash between commit and append.
//
// With a key, the call has a round trip of its own, and the unique index on
// idempotency_key decides the race: INSERT … ON CONFLICT DO NOTHING stores
// the event or finds the key taken; then the owner is returned while it is
// within keptSince, and an expired owner releases the key (its event stays)
// and the insert is tried again.
func (s *Store) CreateEvent(ctx context.Context, e domain.Event, keptSince time.Time) (domain.Event, bool, error) {
	e = normalizeEvent(e)
	params := sqlcgen.InsertEventParams{
		ID:             e.ID,
		Type:           e.Type,
		Source:         e.Source,
		Data:           e.Data,
		OrderingKey:    e.OrderingKey,
		IdempotencyKey: optionalText(e.IdempotencyKey),
		CreatedAt:      e.CreatedAt,
	}
	if e.IdempotencyKey == "" {
		if err := s.events.Commit(ctx, newEvent{event: e}); err != nil {
			return domain.Event{}, false, fmt.Errorf("create event %s: %w", e.ID, err)
		}
		return e, true, nil
	}
	for range maxIdempotencyRounds {
		n, err := s.queries.InsertEvent(ctx, params)
		if err != nil {
			return domain.Event{}, false, fmt.Errorf("create event %s: %w", e.ID, interpretError(err))
		}
		if n == 1 {
			return e, true, nil
		}
		owner, err := s.queries.EventByIdempotencyKey(ctx, e.IdempotencyKey)
		if errors.Is(err, pgx.ErrNoRows) {
			continue // released by another caller since our insert
		}
		if err != nil {
			return domain.Event{}, false, fmt.Errorf("create event %s: find idempotency key owner: %w", e.ID, interpretError(err))
		}
		if owner.CreatedAt.After(keptSince) {
			return toEvent(owner), false, nil
		}
		err = s.queries.ReleaseIdempotencyKey(ctx, sqlcgen.ReleaseIdempotencyKeyParams{
			ID:             owner.ID,
			IdempotencyKey: e.IdempotencyKey,
			KeptSince:      keptSince,
		})
		if err != nil {
			return domain.Event{}, false, fmt.Errorf("create event %s: release expired idempotency key: %w", e.ID, interpretError(err))
		}
	}
	return domain.Event{}, false, fmt.Errorf("create event %s: idempotency key kept changing owner in %d rounds", e.ID, maxIdempotencyRounds)
}

// CreateEventFannedOut implements ports.EventStore. Its calls are
// group-committed with CreateEvent's (see there): the batch's leader reads
// the subscriptions' change counter, loads them again only if it moved,
// runs each inline fan-out, and stores the events and their deliveries in
// one statement.
func (s *Store) CreateEventFannedOut(ctx context.Context, e domain.Event, inline ports.InlineFanOut) ([]string, bool, error) {
	if e.IdempotencyKey != "" {
		return nil, false, fmt.Errorf("create event %s: an event with an idempotency key is not fanned out inline", e.ID)
	}
	var out fanOutcome
	if err := s.events.Commit(ctx, newEvent{event: normalizeEvent(e), inline: inline, out: &out}); err != nil {
		return nil, false, fmt.Errorf("create event %s: %w", e.ID, err)
	}
	return out.deliveries, out.fannedOut, nil
}

// GetEvent implements ports.EventStore.
func (s *Store) GetEvent(ctx context.Context, id string) (domain.Event, error) {
	row, err := s.queries.GetEvent(ctx, id)
	if err != nil {
		return domain.Event{}, fmt.Errorf("get event %s: %w", id, interpretError(err))
	}
	return toEvent(row), nil
}

// GetEvents implements ports.EventStore.
func (s *Store) GetEvents(ctx context.Context, ids []string) ([]domain.Event, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := s.queries.GetEvents(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("get %d events: %w", len(ids), interpretError(err))
	}
	events := make([]domain.Event, len(rows))
	for i, row := range rows {
		events[i] = toEvent(row)
	}
	return events, nil
}

// UnfannedEvents implements ports.EventStore with one statement (see the
// UnfannedEvents query for why concurrent sweeps never overlap).
func (s *Store) UnfannedEvents(ctx context.Context, now time.Time, requeueAfter time.Duration, limit int) ([]string, error) {
	if limit < 1 {
		return nil, nil
	}
	ids, err := s.planned.UnfannedEvents(ctx, sqlcgen.UnfannedEventsParams{
		Now:          now,
		PickedBefore: now.Add(-requeueAfter),
		MaxRows:      int32(limit),
	})
	if err != nil {
		return nil, fmt.Errorf("sweep unfanned events: %w", interpretError(err))
	}
	return ids, nil
}

// CreateDeliveries implements ports.DeliveryStore with one statement (the
// FanOut query) whatever the batch size: it marks the events not yet fanned
// out, completes those with nothing to deliver, and inserts the deliveries
// of the events it marked, atomically.
func (s *Store) CreateDeliveries(ctx context.Context, fanouts []ports.FanOut) ([]string, error) {
	if len(fanouts) == 0 {
		return nil, nil
	}
	// Sized up front (made, not nil: a nil slice would be a NULL array).
	n := 0
	for _, f := range fanouts {
		n += len(f.Deliveries)
	}
	params := sqlcgen.FanOutParams{
		EventIds: make([]string, 0, len(fanouts)), Ids: make([]string, 0, n), DeliveryEventIds: make([]string, 0, n),
		SubscriptionIds: make([]string, 0, n), Statuses: make([]string, 0, n), Attempts: make([]int32, 0, n),
		NextAttemptAts: make([]time.Time, 0, n), OrderingKeys: make([]string, 0, n), CreatedAts: make([]time.Time, 0, n),
		UpdatedAts: make([]time.Time, 0, n), ReservedUntils: make([]time.Time, 0, n),
	}
	listed := make(map[string]bool, len(fanouts))
	for _, f := range fanouts {
		if listed[f.EventID] {
			continue // a batch listing one event twice fans it out once
		}
		listed[f.EventID] = true
		params.EventIds = append(params.EventIds, f.EventID)
		for _, d := range f.Deliveries {
			params.Ids = append(params.Ids, d.ID)
			// The fan-out's event, not d.EventID: deliveries are inserted
			// only for events this call marks fanned out.
			params.DeliveryEventIds = append(params.DeliveryEventIds, f.EventID)
			params.SubscriptionIds = append(params.SubscriptionIds, d.SubscriptionID)
			params.Statuses = append(params.Statuses, string(cmp.Or(d.Status, domain.DeliveryPending)))
			params.Attempts = append(params.Attempts, int32(d.Attempts))
			params.NextAttemptAts = append(params.NextAttemptAts, d.NextAttemptAt)
			params.OrderingKeys = append(params.OrderingKeys, d.OrderingKey)
			params.CreatedAts = append(params.CreatedAts, d.CreatedAt)
			params.UpdatedAts = append(params.UpdatedAts, d.UpdatedAt)
			params.ReservedUntils = append(params.ReservedUntils, d.ReservedUntil)
		}
	}
	created, err := s.planned.FanOut(ctx, params)
	if err != nil {
		return nil, fmt.Errorf("create deliveries of %d events: %w", len(fanouts), interpretError(err))
	}
	return created, nil
}

// RetryDelivery implements ports.DeliveryStore with one statement (its
// event reads as pending again at once); only when nothing was updated
// does a second query tell "does not exist" from "not retryable".
func (s *Store) RetryDelivery(ctx context.Context, id string, now time.Time) (domain.Delivery, error) {
	row, err := s.queries.RetryDelivery(ctx, sqlcgen.RetryDeliveryParams{ID: id, Now: now})
	if errors.Is(err, pgx.ErrNoRows) {
		exists, err := s.queries.DeliveryExists(ctx, id)
		switch {
		case err != nil:
			return domain.Delivery{}, fmt.Errorf("retry delivery %s: %w", id, interpretError(err))
		case !exists:
			return domain.Delivery{}, fmt.Errorf("retry delivery %s: %w", id, domain.ErrNotFound)
		default:
			return domain.Delivery{}, fmt.Errorf("retry delivery %s: %w: only a dead or retrying delivery can be retried", id, domain.ErrConflict)
		}
	}
	if err != nil {
		return domain.Delivery{}, fmt.Errorf("retry delivery %s: %w", id, interpretError(err))
	}
	return toDelivery(sqlcgen.Delivery{
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
	}), nil
}

// RecoverDeliveries implements ports.DeliveryStore with one statement (see
// the RecoverDeliveries query).
func (s *Store) RecoverDeliveries(ctx context.Context, subscriptionID string, since, now time.Time) ([]string, error) {
	row, err := s.queries.RecoverDeliveries(ctx, sqlcgen.RecoverDeliveriesParams{
		SubscriptionID: subscriptionID,
		Since:          since,
		Now:            now,
	})
	if err != nil {
		return nil, fmt.Errorf("recover deliveries of subscription %s: %w", subscriptionID, interpretError(err))
	}
	if !row.SubscriptionFound {
		return nil, fmt.Errorf("recover deliveries of subscription %s: %w", subscriptionID, domain.ErrNotFound)
	}
	return nonNil(row.Ids), nil
}

// ListDeliveries implements ports.DeliveryStore. The query is planned with
// its values on every call (see unprepared), so each combination of
// filters uses the index that fits it.
func (s *Store) ListDeliveries(ctx context.Context, f ports.DeliveryFilter, p ports.Page) ([]domain.Delivery, error) {
	if p.Limit < 1 {
		return nil, fmt.Errorf("list deliveries: limit must be at least 1, got %d", p.Limit)
	}
	rows, err := s.planned.ListDeliveries(ctx, sqlcgen.ListDeliveriesParams{
		After:          p.After,
		SubscriptionID: optionalText(f.SubscriptionID),
		EventID:        optionalText(f.EventID),
		Status:         optionalText(string(f.Status)),
		MaxRows:        int32(p.Limit),
	})
	if err != nil {
		return nil, fmt.Errorf("list deliveries: %w", interpretError(err))
	}
	out := make([]domain.Delivery, len(rows))
	for i, row := range rows {
		out[i] = toDelivery(row)
	}
	return out, nil
}

// DeliveryAttempts implements ports.DeliveryStore. Only when there are no
// attempts does a second query tell a delivery without attempts from one
// that does not exist.
func (s *Store) DeliveryAttempts(ctx context.Context, id string) ([]domain.Attempt, error) {
	rows, err := s.queries.DeliveryAttempts(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("list attempts of delivery %s: %w", id, interpretError(err))
	}
	if len(rows) == 0 {
		exists, err := s.queries.DeliveryExists(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("list attempts of delivery %s: %w", id, interpretError(err))
		}
		if !exists {
			return nil, fmt.Errorf("list attempts of delivery %s: %w", id, domain.ErrNotFound)
		}
	}
	out := make([]domain.Attempt, len(rows))
	for i, row := range rows {
		out[i] = toAttempt(row)
	}
	return out, nil
}

// GetDelivery implements ports.DeliveryStore.
func (s *Store) GetDelivery(ctx context.Context, id string) (domain.Delivery, error) {
	row, err := s.queries.GetDelivery(ctx, id)
	if err != nil {
		return domain.Delivery{}, fmt.Errorf("get delivery %s: %w", id, interpretError(err))
	}
	return toDelivery(row), nil
}

// EventDeliveries implements ports.DeliveryStore.
func (s *Store) EventDeliveries(ctx context.Context, eventID string) ([]domain.Delivery, error) {
	rows, err := s.queries.EventDeliveries(ctx, eventID)
	if err != nil {
		return nil, fmt.Errorf("list deliveries of event %s: %w", eventID, interpretError(err))
	}
	out := make([]domain.Delivery, len(rows))
	for i, row := range rows {
		out[i] = toDelivery(row)
	}
	return out, nil
}

// EventAttempts implements ports.DeliveryStore.
func (s *Store) EventAttempts(ctx context.Context, eventID string) ([]domain.Attempt, error) {
	rows, err := s.queries.EventAttempts(ctx, eventID)
	if err != nil {
		return nil, fmt.Errorf("list attempts of event %s: %w", eventID, interpretError(err))
	}
	out := make([]domain.Attempt, len(rows))
	for i, row := range rows {
		out[i] = toAttempt(row)
	}
	return out, nil
}

// DueDeliveries implements ports.DeliveryStore with one statement (see the
// DueDeliveries query for why concurrent scans never overlap).
func (s *Store) DueDeliveries(ctx context.Context, now time.Time, requeueAfter time.Duration, limit int) ([]string, error) {
	if limit < 1 {
		return nil, nil
	}
	ids, err := s.planned.DueDeliveries(ctx, sqlcgen.DueDeliveriesParams{
		Now:            now,
		EnqueuedBefore: now.Add(-requeueAfter),
		MaxRows:        int32(limit),
	})
	if err != nil {
		return nil, fmt.Errorf("scan due deliveries: %w", interpretError(err))
	}
	return ids, nil
}
