package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dispatch-webhooks/dispatch/adapters/keyring"
	"github.com/dispatch-webhooks/dispatch/adapters/postgres/sqlcgen"
	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/internal/batch"
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
	events *batch.Batcher[newEvent]
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
	// ring seals subscriptions' secrets and headers; without keys they are
	// stored in the clear. See Encryption.
	ring *keyring.Ring
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

// Encryption seals subscriptions' signing secrets and custom headers under
// ring's first key when they are written, and opens them with whichever of
// its keys sealed them when they are read. Without it (or with a ring
// without keys) they are written in the clear; values written in the clear
// are read either way, and Reencrypt seals them.
func Encryption(ring *keyring.Ring) Option {
	return func(s *Store) { s.ring = ring }
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
	row, err := subscriptionRow(s.ring, sub)
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
	return toSubscription(s.ring, row)
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
	return toSubscriptions(s.ring, rows)
}

// ActiveSubscriptions implements ports.SubscriptionStore.
func (s *Store) ActiveSubscriptions(ctx context.Context) ([]domain.Subscription, error) {
	rows, err := s.queries.ActiveSubscriptions(ctx)
	if err != nil {
		return nil, fmt.Errorf("list active subscriptions: %w", interpretError(err))
	}
	return toSubscriptions(s.ring, rows)
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
		sub, err := toSubscription(s.ring, current)
		if err != nil {
			return err
		}
		if err := update(&sub); err != nil {
			return err
		}
		// The id is the row's identity, not something an update may change.
		sub.ID = id
		row, err := subscriptionRow(s.ring, sub)
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
		updated, err = toSubscription(s.ring, row)
		return err
	})
	if err != nil {
		return domain.Subscription{}, fmt.Errorf("update subscription %s: %w", id, err)
	}
	return updated, nil
}

// DeleteSubscription implements ports.SubscriptionStore. Each call is a
// few short transactions, none holding more than batch rows' locks:
//
//  1. The first call marks the subscription (MarkSubscriptionDeleted):
//     hidden from reads and inactive, so fan-out leaves it out from then
//     on, and workers settle its deliveries without a request.
//  2. Each call deletes a batch of its deliveries with their attempts:
//     locked first, so a record of an attempt in flight commits before
//     its attempt is deleted (LockDeliveriesToDelete, DeleteDeliveries).
//  3. When a batch comes short, the subscription row goes: locked for
//     update, so a fan-out that matched it before the mark (holding a
//     key-share lock on it while it inserts) finishes first and its
//     deliveries go too, and later ones find it gone. The deliveries left
//     are locked as in a batch, and when more than a batch is left (a
//     concurrent deletion held rows the batch skipped) the step is rolled
//     back and the next call goes on.
//
// The events that lost a delivery need nothing: their status is derived
// from the deliveries left.
func (s *Store) DeleteSubscription(ctx context.Context, id string, batch int) (bool, error) {
	if batch < 1 {
		return false, fmt.Errorf("delete subscription %s: batch must be at least 1, got %d", id, batch)
	}
	marked, err := s.queries.SubscriptionDeletionMarked(ctx, id)
	if err != nil {
		return false, fmt.Errorf("delete subscription %s: %w", id, interpretError(err))
	}
	if !marked {
		// The change counter's trigger fires on every UPDATE statement,
		// so the mark is written once, not on every call.
		if err := s.queries.MarkSubscriptionDeleted(ctx, id); err != nil {
			return false, fmt.Errorf("delete subscription %s: mark: %w", id, interpretError(err))
		}
	}
	n, err := s.deleteDeliveriesBatch(ctx, id, batch)
	if err != nil {
		return false, fmt.Errorf("delete subscription %s: %w", id, err)
	}
	if n == batch {
		return false, nil
	}
	err = s.inTx(ctx, func(q *sqlcgen.Queries) error {
		if _, err := q.LockSubscription(ctx, id); err != nil {
			return interpretError(err)
		}
		left, err := q.LockDeliveriesToDelete(ctx, sqlcgen.LockDeliveriesToDeleteParams{SubscriptionID: id, MaxRows: int32(batch) + 1})
		if err != nil {
			return interpretError(err)
		}
		if len(left) > batch {
			// A concurrent deletion of it held rows the batch skipped:
			// more than a batch is left, for the next calls.
			return errMoreLeft
		}
		return interpretError(q.DeleteSubscription(ctx, id))
	})
	switch {
	case errors.Is(err, errMoreLeft):
		return false, nil
	case errors.Is(err, domain.ErrNotFound):
		return true, nil // a concurrent deletion of it finished first
	case err != nil:
		return false, fmt.Errorf("delete subscription %s: %w", id, err)
	}
	return true, nil
}

// errMoreLeft rolls back the last step of DeleteSubscription when more
// than a batch of deliveries is left.
var errMoreLeft = errors.New("more than a batch of deliveries left")

// UnfinishedDeletions implements ports.SubscriptionDeletions.
func (s *Store) UnfinishedDeletions(ctx context.Context, limit int) ([]string, error) {
	if limit < 1 {
		return nil, nil
	}
	ids, err := s.queries.UnfinishedDeletions(ctx, int32(limit))
	if err != nil {
		return nil, fmt.Errorf("list unfinished deletions: %w", interpretError(err))
	}
	return ids, nil
}

// deleteDeliveriesBatch deletes up to batch deliveries of subscription id
// with their attempts in one transaction, and returns how many it locked:
// fewer than batch means none was left (but for a few a stale fan-out may
// still insert, which the last step of DeleteSubscription takes).
func (s *Store) deleteDeliveriesBatch(ctx context.Context, id string, batch int) (int, error) {
	var n int
	err := s.inTx(ctx, func(q *sqlcgen.Queries) error {
		ids, err := q.LockDeliveriesToDelete(ctx, sqlcgen.LockDeliveriesToDeleteParams{SubscriptionID: id, MaxRows: int32(batch)})
		if err != nil {
			return interpretError(err)
		}
		n = len(ids)
		if n == 0 {
			return nil
		}
		_, err = q.DeleteDeliveries(ctx, ids)
		return interpretError(err)
	})
	if err != nil {
		return 0, fmt.Errorf("delete a batch of deliveries: %w", err)
	}
	return n, nil
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
// With a key, the call has a round trip of its own: one statement claims
// the key in idempotency_keys and stores the event (InsertKeyedEvent), or
// finds the key owned within keptSince, and then the owner is read. Two
// calls with one key serialize on the key's row.
func (s *Store) CreateEvent(ctx context.Context, e domain.Event, keptSince time.Time) (domain.Event, bool, error) {
	e = normalizeEvent(e)
	if e.IdempotencyKey == "" {
		if err := s.events.Commit(ctx, newEvent{event: e}); err != nil {
			return domain.Event{}, false, fmt.Errorf("create event %s: %w", e.ID, err)
		}
		return e, true, nil
	}
	params := sqlcgen.InsertKeyedEventParams{
		ID:             e.ID,
		Type:           e.Type,
		Source:         e.Source,
		Data:           e.Data,
		OrderingKey:    e.OrderingKey,
		IdempotencyKey: e.IdempotencyKey,
		CreatedAt:      e.CreatedAt,
		KeptSince:      keptSince,
	}
	for range maxIdempotencyRounds {
		n, err := s.queries.InsertKeyedEvent(ctx, params)
		if err != nil {
			return domain.Event{}, false, fmt.Errorf("create event %s: %w", e.ID, interpretError(err))
		}
		if n == 1 {
			return e, true, nil
		}
		owner, err := s.queries.IdempotencyKeyOwner(ctx, e.IdempotencyKey)
		if errors.Is(err, pgx.ErrNoRows) {
			continue // expired and deleted since our insert: claim it again
		}
		if err != nil {
			return domain.Event{}, false, fmt.Errorf("create event %s: find idempotency key owner: %w", e.ID, interpretError(err))
		}
		return toEvent(owner), false, nil
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

// CreateDeliveries implements ports.DeliveryFanOut with one statement (the
// FanOut query) whatever the batch size: it marks the events not yet fanned
// out, completes those with nothing to deliver, and inserts the deliveries
// of the events it marked, atomically.
//
// When PostgreSQL rejects the statement because of a row's content (see
// rowRejected: a delivery id that exists, an ordering key a text column
// cannot hold), nothing was written, and the events that hold nothing
// wrong must not share the guilty one's fate: each event is then written
// on its own, and those rejected alone are returned in a
// *ports.RejectedFanOuts with the others' created deliveries.
func (s *Store) CreateDeliveries(ctx context.Context, fanouts []ports.FanOut) ([]string, error) {
	if len(fanouts) == 0 {
		return nil, nil
	}
	created, err := s.fanOut(ctx, fanouts)
	if err == nil || !rowRejected(err) {
		return created, err
	}
	created = nil
	rejected := map[string]string{}
	for _, f := range fanouts {
		one, err := s.fanOut(ctx, []ports.FanOut{f})
		switch {
		case err == nil:
			created = append(created, one...)
		case rowRejected(err):
			rejected[f.EventID] = rejectionReason(err)
		default:
			return created, err
		}
	}
	if len(rejected) > 0 {
		return created, &ports.RejectedFanOuts{Reasons: rejected}
	}
	return created, nil
}

// rejectionReason says why PostgreSQL refused a fan-out, for the event's
// failure_reason: its message and SQLSTATE, without the statement's
// context.
func rejectionReason(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return validText(fmt.Sprintf("its deliveries cannot be stored: %s (SQLSTATE %s)", pgErr.Message, pgErr.Code))
	}
	return validText(err.Error())
}

// fanOut runs the FanOut statement for fanouts.
func (s *Store) fanOut(ctx context.Context, fanouts []ports.FanOut) ([]string, error) {
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
		// Not interpreted yet: the caller asks rowRejected first.
		return nil, fmt.Errorf("create deliveries of %d events: %w", len(fanouts), err)
	}
	return created, nil
}

// ExpireIdempotencyKeys implements ports.EventStore with one statement
// (ExpireIdempotencyKeys).
func (s *Store) ExpireIdempotencyKeys(ctx context.Context, keptSince time.Time, limit int) (int, error) {
	if limit < 1 {
		return 0, nil
	}
	n, err := s.queries.ExpireIdempotencyKeys(ctx, sqlcgen.ExpireIdempotencyKeysParams{KeptSince: keptSince, MaxRows: int32(limit)})
	if err != nil {
		return 0, fmt.Errorf("expire idempotency keys: %w", interpretError(err))
	}
	return int(n), nil
}

// FailFanOut implements ports.EventStore with one statement (FailFanOut).
func (s *Store) FailFanOut(ctx context.Context, id, reason string, now time.Time, maxTries int) (bool, error) {
	row, err := s.queries.FailFanOut(ctx, sqlcgen.FailFanOutParams{
		ID: id, MaxTries: int32(max(maxTries, 1)), Reason: cmp.Or(validText(reason), "fan-out failed"), Now: now,
	})
	switch {
	case err != nil:
		return false, fmt.Errorf("fail fan-out of event %s: %w", id, interpretError(err))
	case !row.Found:
		return false, fmt.Errorf("fail fan-out of event %s: %w", id, domain.ErrNotFound)
	}
	return row.Settled, nil
}

// RetryDelivery implements ports.DeliveryRecords with one statement (its
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

// RecoverDeliveries implements ports.DeliveryRecords with one statement (see
// the RecoverDeliveriesBatch query).
func (s *Store) RecoverDeliveries(ctx context.Context, subscriptionID string, since, now time.Time, p ports.Page) (ports.Recovered, error) {
	if p.Limit < 1 {
		return ports.Recovered{}, fmt.Errorf("recover deliveries of subscription %s: limit must be at least 1, got %d", subscriptionID, p.Limit)
	}
	row, err := s.queries.RecoverDeliveriesBatch(ctx, sqlcgen.RecoverDeliveriesBatchParams{
		SubscriptionID: subscriptionID,
		Since:          since,
		After:          p.After,
		MaxRows:        int32(p.Limit),
		Now:            now,
	})
	if err != nil {
		return ports.Recovered{}, fmt.Errorf("recover deliveries of subscription %s: %w", subscriptionID, interpretError(err))
	}
	if !row.SubscriptionFound {
		return ports.Recovered{}, fmt.Errorf("recover deliveries of subscription %s: %w", subscriptionID, domain.ErrNotFound)
	}
	out := ports.Recovered{IDs: nonNil(row.Ids)}
	if int(row.Scanned) == p.Limit {
		out.Next = row.LastID
	}
	return out, nil
}

// ListDeliveries implements ports.DeliveryRecords. The query is planned with
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

// DeliveryAttempts implements ports.DeliveryRecords. Only when there are no
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

// GetDelivery implements ports.DeliveryRecords.
func (s *Store) GetDelivery(ctx context.Context, id string) (domain.Delivery, error) {
	row, err := s.queries.GetDelivery(ctx, id)
	if err != nil {
		return domain.Delivery{}, fmt.Errorf("get delivery %s: %w", id, interpretError(err))
	}
	return toDelivery(row), nil
}

// EventDeliveries implements ports.DeliveryRecords.
func (s *Store) EventDeliveries(ctx context.Context, eventID string, p ports.Page) ([]domain.Delivery, error) {
	if p.Limit < 1 {
		return nil, fmt.Errorf("list deliveries of event %s: limit must be at least 1, got %d", eventID, p.Limit)
	}
	rows, err := s.queries.EventDeliveriesPage(ctx, sqlcgen.EventDeliveriesPageParams{
		EventID: eventID, AfterSubscription: p.After, MaxRows: int32(p.Limit),
	})
	if err != nil {
		return nil, fmt.Errorf("list deliveries of event %s: %w", eventID, interpretError(err))
	}
	out := make([]domain.Delivery, len(rows))
	for i, row := range rows {
		out[i] = toDelivery(row)
	}
	return out, nil
}

// EventAttempts implements ports.DeliveryRecords.
func (s *Store) EventAttempts(ctx context.Context, eventID string, p ports.AttemptPage) ([]domain.Attempt, error) {
	if p.Limit < 1 {
		return nil, fmt.Errorf("list attempts of event %s: limit must be at least 1, got %d", eventID, p.Limit)
	}
	rows, err := s.queries.EventAttemptsPage(ctx, sqlcgen.EventAttemptsPageParams{
		EventID: eventID, AfterSubscription: p.AfterSubscription, AfterAttempt: int32(p.AfterAttempt), MaxRows: int32(p.Limit),
	})
	if err != nil {
		return nil, fmt.Errorf("list attempts of event %s: %w", eventID, interpretError(err))
	}
	out := make([]domain.Attempt, len(rows))
	for i, row := range rows {
		out[i] = toAttempt(row)
	}
	return out, nil
}

// DueDeliveries implements ports.DeliveryScan with one statement (see the
// DueDeliveries query for why concurrent scans never overlap).
func (s *Store) DueDeliveries(ctx context.Context, now time.Time, requeueAfter time.Duration, limit int) ([]ports.DueDelivery, error) {
	if limit < 1 {
		return nil, nil
	}
	rows, err := s.planned.DueDeliveries(ctx, sqlcgen.DueDeliveriesParams{
		Now:            now,
		EnqueuedBefore: now.Add(-requeueAfter),
		MaxRows:        int32(limit),
	})
	if err != nil {
		return nil, fmt.Errorf("scan due deliveries: %w", interpretError(err))
	}
	due := make([]ports.DueDelivery, len(rows))
	for i, r := range rows {
		due[i] = ports.DueDelivery{ID: r.ID, SubscriptionID: r.SubscriptionID}
	}
	return due, nil
}
