package memory

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

var _ ports.Store = (*Store)(nil)

// Store is ports.Store in memory. One mutex guards everything, which makes
// every method trivially atomic; scans walk every row, which is fine at the
// sizes of tests and `dispatch dev`. Values are copied in and out, so a
// caller never shares a slice or map with the store.
type Store struct {
	mu            sync.Mutex
	subscriptions map[string]domain.Subscription
	// deleting holds the subscriptions whose deletion is under way, each
	// with the order it was marked in: every read treats them as gone.
	deleting map[string]uint64
	// marks counts the deletions ever marked.
	marks uint64
	// subscriptionVersion counts changes to subscriptions;
	// subscriptionVersions holds the count of each subscription's last
	// change, deletedSubscriptions that of each deletion (see
	// SubscriptionChanges).
	subscriptionVersion  int64
	subscriptionVersions map[string]int64
	deletedSubscriptions map[string]int64
	// active indexes the active subscriptions, for inline fan-out.
	active *domain.SubscriptionIndex
	events map[string]*storedEvent
	// idempotencyKeys maps a key to the id of the event that owns it.
	idempotencyKeys map[string]string
	deliveries      map[string]*storedDelivery
	// eventDeliveries lists the deliveries of each event.
	eventDeliveries map[string][]string
	// attempts lists each delivery's attempts in attempt order.
	attempts map[string][]domain.Attempt
}

// storedEvent is an event with the outbox state PostgreSQL keeps in
// events.fanned_out_at and events.enqueued_at (zero until a sweep picks it).
type storedEvent struct {
	event      domain.Event
	fannedOut  bool
	enqueuedAt time.Time
	// fanOutFailures counts failed tries to fan the event out (FailFanOut).
	fanOutFailures int
}

// storedDelivery is a delivery with its enqueued mark (zero when cleared)
// and its creator's reservation (zero when none, or once it ended).
type storedDelivery struct {
	delivery      domain.Delivery
	enqueuedAt    time.Time
	reservedUntil time.Time
}

// NewStore returns an empty Store.
func NewStore() *Store {
	return &Store{
		subscriptions:        map[string]domain.Subscription{},
		deleting:             map[string]uint64{},
		subscriptionVersions: map[string]int64{},
		deletedSubscriptions: map[string]int64{},
		active:               domain.NewSubscriptionIndex(),
		events:               map[string]*storedEvent{},
		idempotencyKeys:      map[string]string{},
		deliveries:           map[string]*storedDelivery{},
		eventDeliveries:      map[string][]string{},
		attempts:             map[string][]domain.Attempt{},
	}
}

// Ping always succeeds: the store is the process itself.
func (s *Store) Ping(context.Context) error { return nil }

// CreateSubscription implements ports.SubscriptionStore.
func (s *Store) CreateSubscription(_ context.Context, sub domain.Subscription) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.subscriptions[sub.ID]; ok {
		return fmt.Errorf("create subscription %s: %w: id exists", sub.ID, domain.ErrConflict)
	}
	s.putSubscription(sub)
	return nil
}

// putSubscription stores sub and records the change; s.mu is held.
func (s *Store) putSubscription(sub domain.Subscription) {
	s.subscriptions[sub.ID] = copySubscription(sub)
	s.subscriptionVersion++
	s.subscriptionVersions[sub.ID] = s.subscriptionVersion
	s.active.Put(sub)
}

// GetSubscription implements ports.SubscriptionStore.
func (s *Store) GetSubscription(_ context.Context, id string) (domain.Subscription, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sub, ok := s.subscriptions[id]
	if !ok || isDeleting(s.deleting, id) {
		return domain.Subscription{}, fmt.Errorf("get subscription %s: %w", id, domain.ErrNotFound)
	}
	return copySubscription(sub), nil
}

// ListSubscriptions implements ports.SubscriptionStore.
func (s *Store) ListSubscriptions(_ context.Context, p ports.Page) ([]domain.Subscription, error) {
	if p.Limit < 1 {
		return nil, fmt.Errorf("list subscriptions: limit must be at least 1, got %d", p.Limit)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := slices.DeleteFunc(slices.Sorted(maps.Keys(s.subscriptions)), func(id string) bool { return isDeleting(s.deleting, id) })
	start, _ := slices.BinarySearch(ids, p.After)
	if start < len(ids) && ids[start] == p.After {
		start++
	}
	ids = ids[start:min(len(ids), start+p.Limit)]
	out := make([]domain.Subscription, len(ids))
	for i, id := range ids {
		out[i] = copySubscription(s.subscriptions[id])
	}
	return out, nil
}

// ActiveSubscriptions implements ports.SubscriptionStore.
func (s *Store) ActiveSubscriptions(context.Context) ([]domain.Subscription, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []domain.Subscription
	for _, id := range slices.Sorted(maps.Keys(s.subscriptions)) {
		if sub := s.subscriptions[id]; sub.Active {
			out = append(out, copySubscription(sub))
		}
	}
	return out, nil
}

// subscriptionPage is the most subscriptions SubscriptionChanges tells
// at once.
const subscriptionPage = 500

// SubscriptionChanges implements ports.SubscriptionStore.
func (s *Store) SubscriptionChanges(_ context.Context, since int64, changed func([]domain.Subscription)) (ports.SubscriptionChanges, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := ports.SubscriptionChanges{Cursor: s.subscriptionVersion}
	if since == s.subscriptionVersion {
		return out, nil
	}
	var page []domain.Subscription
	for _, id := range slices.Sorted(maps.Keys(s.subscriptions)) {
		sub := s.subscriptions[id]
		if since == 0 && sub.Active || since != 0 && s.subscriptionVersions[id] > since {
			page = append(page, copySubscription(sub))
		}
	}
	for chunk := range slices.Chunk(page, subscriptionPage) {
		changed(chunk)
	}
	if since != 0 {
		for _, id := range slices.Sorted(maps.Keys(s.deletedSubscriptions)) {
			if s.deletedSubscriptions[id] > since {
				out.Deleted = append(out.Deleted, id)
			}
		}
	}
	return out, nil
}

// MatchActive implements ports.SubscriptionStore.
func (s *Store) MatchActive(_ context.Context, match func(*domain.SubscriptionIndex)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	match(s.active)
	return nil
}

// UpdateSubscription implements ports.SubscriptionStore. update runs under
// the store's lock, so it must not call back into the store.
func (s *Store) UpdateSubscription(_ context.Context, id string, update func(*domain.Subscription) error) (domain.Subscription, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	current, ok := s.subscriptions[id]
	if !ok || isDeleting(s.deleting, id) {
		return domain.Subscription{}, fmt.Errorf("update subscription %s: %w", id, domain.ErrNotFound)
	}
	sub := copySubscription(current)
	if err := update(&sub); err != nil {
		return domain.Subscription{}, fmt.Errorf("update subscription %s: %w", id, err)
	}
	// As in PostgreSQL, the id and creation time are not updatable.
	sub.ID, sub.CreatedAt = id, current.CreatedAt
	s.putSubscription(sub)
	return copySubscription(s.subscriptions[id]), nil
}

// DeleteSubscription implements ports.SubscriptionStore.
func (s *Store) DeleteSubscription(_ context.Context, id string, batch int) (bool, error) {
	if batch < 1 {
		return false, fmt.Errorf("delete subscription %s: batch must be at least 1, got %d", id, batch)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sub, ok := s.subscriptions[id]
	if !ok {
		return false, fmt.Errorf("delete subscription %s: %w", id, domain.ErrNotFound)
	}
	if !isDeleting(s.deleting, id) {
		s.marks++
		s.deleting[id] = s.marks
		sub.Active = false
		s.putSubscription(sub) // a change: copies take it out
	}
	var mine []string
	for did, d := range s.deliveries {
		if d.delivery.SubscriptionID == id {
			mine = append(mine, did)
		}
	}
	slices.Sort(mine)
	touched := map[string]bool{}
	for _, did := range mine[:min(batch, len(mine))] {
		eventID := s.deliveries[did].delivery.EventID
		delete(s.deliveries, did)
		delete(s.attempts, did)
		s.eventDeliveries[eventID] = slices.DeleteFunc(s.eventDeliveries[eventID], func(x string) bool { return x == did })
		touched[eventID] = true
	}
	for eventID := range touched {
		s.rollUp(eventID)
	}
	if len(mine) > batch {
		return false, nil
	}
	delete(s.subscriptions, id)
	delete(s.deleting, id)
	delete(s.subscriptionVersions, id)
	s.subscriptionVersion++
	s.deletedSubscriptions[id] = s.subscriptionVersion
	s.active.Remove(id)
	return true, nil
}

// UnfinishedDeletions implements ports.SubscriptionDeletions.
func (s *Store) UnfinishedDeletions(_ context.Context, limit int) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := slices.SortedFunc(maps.Keys(s.deleting), func(a, b string) int { return cmp.Compare(s.deleting[a], s.deleting[b]) })
	return ids[:min(len(ids), max(limit, 0))], nil
}

func isDeleting(deleting map[string]uint64, id string) bool {
	_, ok := deleting[id]
	return ok
}

// CreateEvent implements ports.EventStore.
func (s *Store) CreateEvent(_ context.Context, e domain.Event, keptSince time.Time) (domain.Event, bool, error) {
	e = copyEvent(e)
	e.CreatedAt = normalizeTime(e.CreatedAt)
	e.Status = cmp.Or(e.Status, domain.EventPending)
	keptSince = normalizeTime(keptSince)
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.IdempotencyKey != "" {
		if ownerID, ok := s.idempotencyKeys[e.IdempotencyKey]; ok {
			if owner := s.events[ownerID].event; owner.CreatedAt.After(keptSince) {
				return copyEvent(owner), false, nil
			}
		}
	}
	if _, ok := s.events[e.ID]; ok {
		return domain.Event{}, false, fmt.Errorf("create event %s: %w: id exists", e.ID, domain.ErrConflict)
	}
	if e.IdempotencyKey != "" {
		// An expired owner gives the key up, as in PostgreSQL: its event
		// stays, with the key it was published with, but no longer
		// answers for it.
		s.idempotencyKeys[e.IdempotencyKey] = e.ID
	}
	s.events[e.ID] = &storedEvent{event: e}
	return copyEvent(e), true, nil
}

// CreateEventFannedOut implements ports.EventStore.
func (s *Store) CreateEventFannedOut(_ context.Context, e domain.Event, inline ports.InlineFanOut) ([]string, bool, error) {
	if e.IdempotencyKey != "" {
		return nil, false, fmt.Errorf("create event %s: an event with an idempotency key is not fanned out inline", e.ID)
	}
	e = copyEvent(e)
	e.CreatedAt = normalizeTime(e.CreatedAt)
	e.Status = cmp.Or(e.Status, domain.EventPending)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.events[e.ID]; ok {
		return nil, false, fmt.Errorf("create event %s: %w: id exists", e.ID, domain.ErrConflict)
	}
	deliveries, ok := inline(copyEvent(e), s.active)
	s.events[e.ID] = &storedEvent{event: e}
	if !ok {
		return nil, false, nil
	}
	created, err := s.createDeliveries([]ports.FanOut{{EventID: e.ID, Deliveries: deliveries}})
	if err != nil {
		delete(s.events, e.ID) // all or nothing, like the transaction
		return nil, false, fmt.Errorf("create event %s: %w", e.ID, err)
	}
	return created, true, nil
}

// GetEvent implements ports.EventStore.
func (s *Store) GetEvent(_ context.Context, id string) (domain.Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.events[id]
	if !ok {
		return domain.Event{}, fmt.Errorf("get event %s: %w", id, domain.ErrNotFound)
	}
	return copyEvent(e.event), nil
}

// GetEvents implements ports.EventStore.
func (s *Store) GetEvents(_ context.Context, ids []string) ([]domain.Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []domain.Event
	seen := map[string]bool{}
	for _, id := range ids {
		if e, ok := s.events[id]; ok && !seen[id] {
			seen[id] = true
			out = append(out, copyEvent(e.event))
		}
	}
	return out, nil
}

// UnfannedEvents implements ports.EventStore.
func (s *Store) UnfannedEvents(_ context.Context, now time.Time, requeueAfter time.Duration, limit int) ([]string, error) {
	now = normalizeTime(now)
	pickedBefore := normalizeTime(now.Add(-requeueAfter))
	s.mu.Lock()
	defer s.mu.Unlock()
	var found []*storedEvent
	for _, e := range s.events {
		if e.fannedOut || e.event.CreatedAt.After(pickedBefore) || e.enqueuedAt.After(pickedBefore) {
			continue
		}
		found = append(found, e)
	}
	slices.SortFunc(found, func(a, b *storedEvent) int {
		return cmp.Or(a.event.CreatedAt.Compare(b.event.CreatedAt), cmp.Compare(a.event.ID, b.event.ID))
	})
	found = found[:min(len(found), max(limit, 0))]
	ids := make([]string, len(found))
	for i, e := range found {
		e.enqueuedAt = now
		ids[i] = e.event.ID
	}
	return ids, nil
}

// CreateDeliveries implements ports.DeliveryFanOut. Like PostgreSQL's
// statement, it leaves out a delivery to a subscription that does not
// exist, and skips an event that does not exist.
func (s *Store) CreateDeliveries(_ context.Context, fanouts []ports.FanOut) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.createDeliveries(fanouts)
}

// createDeliveries is CreateDeliveries with s.mu held. Each event's
// fan-out is checked before any of it is stored, and a refused one fails
// alone (*ports.RejectedFanOuts).
func (s *Store) createDeliveries(fanouts []ports.FanOut) ([]string, error) {
	var created []string
	rejected := map[string]string{}
	pending := map[string]bool{}
	for _, f := range fanouts {
		e, ok := s.events[f.EventID]
		if !ok || e.fannedOut || pending[f.EventID] {
			continue
		}
		pending[f.EventID] = true
		if reason := s.refusedFanOut(f); reason != "" {
			rejected[f.EventID] = reason
			continue
		}
		e.fannedOut = true
		if len(f.Deliveries) == 0 {
			e.event.Status = domain.EventDelivered
		}
		for _, d := range f.Deliveries {
			if _, ok := s.subscriptions[d.SubscriptionID]; !ok {
				continue // deleted since it was matched
			}
			d = normalizeDelivery(d)
			d.EventID = f.EventID
			d.Status = cmp.Or(d.Status, domain.DeliveryPending)
			stored := &storedDelivery{delivery: d, enqueuedAt: d.CreatedAt}
			if d.ReservedUntil.After(d.CreatedAt) {
				stored.reservedUntil = normalizeTime(d.ReservedUntil)
			}
			stored.delivery.ReservedUntil = time.Time{}
			s.deliveries[d.ID] = stored
			s.eventDeliveries[d.EventID] = append(s.eventDeliveries[d.EventID], d.ID)
			created = append(created, d.ID)
		}
	}
	if len(rejected) > 0 {
		return created, &ports.RejectedFanOuts{Reasons: rejected}
	}
	return created, nil
}

// refusedFanOut says why f cannot be stored, or "" when it can: what
// PostgreSQL's unique indexes refuse.
func (s *Store) refusedFanOut(f ports.FanOut) string {
	pairs := map[string]bool{}
	for _, d := range f.Deliveries {
		if _, ok := s.deliveries[d.ID]; ok {
			return fmt.Sprintf("%v: delivery %s exists", domain.ErrConflict, d.ID)
		}
		if pairs[d.SubscriptionID] {
			return fmt.Sprintf("%v: two deliveries to subscription %s", domain.ErrConflict, d.SubscriptionID)
		}
		pairs[d.SubscriptionID] = true
	}
	return ""
}

// ExpireIdempotencyKeys implements ports.EventStore.
func (s *Store) ExpireIdempotencyKeys(_ context.Context, keptSince time.Time, limit int) (int, error) {
	keptSince = normalizeTime(keptSince)
	s.mu.Lock()
	defer s.mu.Unlock()
	var expired []*storedEvent
	for _, id := range s.idempotencyKeys {
		if e := s.events[id]; !e.event.CreatedAt.After(keptSince) {
			expired = append(expired, e)
		}
	}
	slices.SortFunc(expired, func(a, b *storedEvent) int {
		return cmp.Or(a.event.CreatedAt.Compare(b.event.CreatedAt), cmp.Compare(a.event.ID, b.event.ID))
	})
	expired = expired[:min(len(expired), max(limit, 0))]
	for _, e := range expired {
		delete(s.idempotencyKeys, e.event.IdempotencyKey)
	}
	return len(expired), nil
}

// FailFanOut implements ports.EventStore.
func (s *Store) FailFanOut(_ context.Context, id, reason string, now time.Time, maxTries int) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.events[id]
	if !ok {
		return false, fmt.Errorf("fail fan-out of event %s: %w", id, domain.ErrNotFound)
	}
	if e.fannedOut {
		return false, nil
	}
	e.fanOutFailures++
	if e.fanOutFailures < maxTries {
		return false, nil
	}
	e.fannedOut = true
	e.event.Status = domain.EventFailed
	e.event.FailureReason = cmp.Or(reason, "fan-out failed")
	return true, nil
}

// ClaimDelivery implements ports.DeliveryClaims.
func (s *Store) ClaimDelivery(_ context.Context, id string, now time.Time, leaseMargin time.Duration) (ports.Claimed, error) {
	return s.claim(id, normalizeTime(now), leaseMargin, false)
}

// TakeDelivery implements ports.DeliveryClaims. Reading is all but free
// here, so it reads the delivery rather than trusting fresh.
func (s *Store) TakeDelivery(_ context.Context, fresh domain.Delivery, now time.Time, leaseMargin time.Duration) (ports.Claimed, error) {
	return s.claim(fresh.ID, normalizeTime(now), leaseMargin, true)
}

// claim is ClaimDelivery, and TakeDelivery when fresh.
func (s *Store) claim(id string, now time.Time, leaseMargin time.Duration, fresh bool) (ports.Claimed, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := s.deliveries[id]
	if !ok {
		return ports.Claimed{}, fmt.Errorf("claim delivery %s: %w", id, domain.ErrNotFound)
	}
	timeout := s.subscriptions[d.delivery.SubscriptionID].Timeout
	lease := normalizeTime(now.Add(timeout + leaseMargin))
	claimed := func() ports.Claimed {
		return ports.Claimed{
			Delivery:     d.delivery,
			Event:        copyEvent(s.events[d.delivery.EventID].event),
			Subscription: copySubscription(s.subscriptions[d.delivery.SubscriptionID]),
		}
	}
	if fresh && d.delivery.OrderingKey == "" && !d.reservedUntil.IsZero() && !d.reservedUntil.Before(lease) {
		return claimed(), nil // taken: the reservation is the lease
	}
	if d.delivery.Status.Terminal() || d.delivery.NextAttemptAt.After(now) || (!fresh && d.reservedUntil.After(now)) {
		return ports.Claimed{}, fmt.Errorf("claim delivery %s: %w: terminal, not due, or leased or reserved to another worker", id, domain.ErrConflict)
	}
	if !s.firstInLine(d.delivery) {
		d.enqueuedAt = time.Time{}
		return ports.Claimed{}, fmt.Errorf("claim delivery %s: %w: held behind an earlier event with its ordering key", id, domain.ErrConflict)
	}
	d.delivery.Status = domain.DeliveryDelivering
	d.delivery.NextAttemptAt = lease
	d.delivery.UpdatedAt = now
	d.reservedUntil = time.Time{}
	return claimed(), nil
}

// RecordAttempt implements ports.DeliveryClaims.
func (s *Store) RecordAttempt(_ context.Context, d domain.Delivery, a domain.Attempt) ([]string, error) {
	if a.DeliveryID != "" && a.DeliveryID != d.ID {
		return nil, fmt.Errorf("record attempt: attempt of delivery %s given with delivery %s", a.DeliveryID, d.ID)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	stored, ok := s.deliveries[d.ID]
	if !ok {
		return nil, fmt.Errorf("record attempt %d of delivery %s: %w", a.Number, d.ID, domain.ErrNotFound)
	}
	attempts := s.attempts[d.ID]
	i, found := slices.BinarySearchFunc(attempts, a.Number, func(x domain.Attempt, n int) int { return cmp.Compare(x.Number, n) })
	if found {
		// The attempt number fences a worker whose lease expired, as the
		// primary key does in PostgreSQL.
		return nil, fmt.Errorf("record attempt %d of delivery %s: %w: attempt exists", a.Number, d.ID, domain.ErrConflict)
	}
	a.DeliveryID = d.ID
	a.SubscriptionID = stored.delivery.SubscriptionID
	a.Duration = a.Duration.Truncate(time.Microsecond)
	a.CreatedAt = normalizeTime(a.CreatedAt)
	s.attempts[d.ID] = slices.Insert(attempts, i, a)

	state := stored.delivery
	state.Attempts = d.Attempts
	state.LastStatusCode = d.LastStatusCode
	return s.storeState(stored, state, d), nil
}

// storeState stores state, with the fields RecordAttempt and ReleaseDelivery
// both take from d, as stored's delivery, and clears its enqueued mark.
// When the delivery became terminal it settles its event and, if the
// delivery is ordered, returns the next in line.
func (s *Store) storeState(stored *storedDelivery, state, d domain.Delivery) (next []string) {
	state.Status = d.Status
	state.NextAttemptAt = normalizeTime(d.NextAttemptAt)
	state.LastError = d.LastError
	state.Reason = d.Reason
	state.UpdatedAt = normalizeTime(d.UpdatedAt)
	stored.delivery = state
	stored.enqueuedAt = time.Time{}
	stored.reservedUntil = time.Time{}
	if !state.Status.Terminal() {
		return nil
	}
	s.rollUp(state.EventID)
	if state.OrderingKey == "" {
		return nil
	}
	return s.nextInLine(state.SubscriptionID, state.OrderingKey)
}

// firstInLine asks domain.FirstInLine of d with what the store holds;
// s.mu is held.
func (s *Store) firstInLine(d domain.Delivery) bool {
	return domain.FirstInLine(d, s.subscriptions[d.SubscriptionID], s.allDeliveries, s.unfannedEvents)
}

// allDeliveries yields every delivery; s.mu is held.
func (s *Store) allDeliveries(yield func(domain.Delivery) bool) {
	for _, d := range s.deliveries {
		if !yield(d.delivery) {
			return
		}
	}
}

// unfannedEvents yields every event not fanned out yet; s.mu is held.
func (s *Store) unfannedEvents(yield func(domain.Event) bool) {
	for _, e := range s.events {
		if !e.fannedOut && !yield(e.event) {
			return
		}
	}
}

// nextInLine returns the delivery of subscriptionID and orderingKey with
// the smallest event id among those not terminal, if it is first in line
// (no earlier event that could join its line awaits fan-out).
func (s *Store) nextInLine(subscriptionID, orderingKey string) []string {
	var first *domain.Delivery
	for _, other := range s.deliveries {
		o := &other.delivery
		if o.SubscriptionID != subscriptionID || o.OrderingKey != orderingKey || o.Status.Terminal() {
			continue
		}
		if first == nil || o.EventID < first.EventID {
			first = o
		}
	}
	if first == nil || !s.firstInLine(*first) {
		return nil
	}
	return []string{first.ID}
}

// ReleaseDelivery implements ports.DeliveryClaims.
func (s *Store) ReleaseDelivery(_ context.Context, d domain.Delivery) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	stored, ok := s.deliveries[d.ID]
	if !ok {
		return nil, fmt.Errorf("release delivery %s: %w", d.ID, domain.ErrNotFound)
	}
	return s.storeState(stored, stored.delivery, d), nil
}

// RetryDelivery implements ports.DeliveryRecords.
func (s *Store) RetryDelivery(_ context.Context, id string, now time.Time) (domain.Delivery, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := s.deliveries[id]
	if !ok {
		return domain.Delivery{}, fmt.Errorf("retry delivery %s: %w", id, domain.ErrNotFound)
	}
	if st := d.delivery.Status; st != domain.DeliveryDead && st != domain.DeliveryRetrying {
		return domain.Delivery{}, fmt.Errorf("retry delivery %s: %w: only a dead or retrying delivery can be retried", id, domain.ErrConflict)
	}
	s.retry(d, normalizeTime(now))
	return d.delivery, nil
}

// retry makes d due at now and reopens its event.
func (s *Store) retry(d *storedDelivery, now time.Time) {
	d.delivery.Status = domain.DeliveryRetrying
	d.delivery.NextAttemptAt = now
	d.delivery.Reason = ""
	d.delivery.UpdatedAt = now
	d.enqueuedAt = time.Time{}
	s.events[d.delivery.EventID].event.Status = domain.EventPending
}

// RecoverDeliveries implements ports.DeliveryRecords.
func (s *Store) RecoverDeliveries(_ context.Context, subscriptionID string, since, now time.Time, p ports.Page) (ports.Recovered, error) {
	if p.Limit < 1 {
		return ports.Recovered{}, fmt.Errorf("recover deliveries of subscription %s: limit must be at least 1, got %d", subscriptionID, p.Limit)
	}
	since, now = normalizeTime(since), normalizeTime(now)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.subscriptions[subscriptionID]; !ok || isDeleting(s.deleting, subscriptionID) {
		return ports.Recovered{}, fmt.Errorf("recover deliveries of subscription %s: %w", subscriptionID, domain.ErrNotFound)
	}
	out := ports.Recovered{IDs: []string{}}
	scanned := 0
	for _, id := range slices.Sorted(maps.Keys(s.deliveries)) {
		d := s.deliveries[id]
		if id <= p.After || d.delivery.SubscriptionID != subscriptionID || d.delivery.Status != domain.DeliveryDead || d.delivery.UpdatedAt.Before(since) {
			continue
		}
		s.retry(d, now)
		out.IDs = append(out.IDs, id)
		if scanned++; scanned == p.Limit {
			out.Next = id
			break
		}
	}
	return out, nil
}

// ListDeliveries implements ports.DeliveryRecords.
func (s *Store) ListDeliveries(_ context.Context, f ports.DeliveryFilter, p ports.Page) ([]domain.Delivery, error) {
	if p.Limit < 1 {
		return nil, fmt.Errorf("list deliveries: limit must be at least 1, got %d", p.Limit)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []domain.Delivery{}
	for _, id := range slices.Sorted(maps.Keys(s.deliveries)) {
		if len(out) == p.Limit {
			break
		}
		d := s.deliveries[id].delivery
		if id <= p.After ||
			(f.SubscriptionID != "" && d.SubscriptionID != f.SubscriptionID) ||
			(f.EventID != "" && d.EventID != f.EventID) ||
			(f.Status != "" && d.Status != f.Status) {
			continue
		}
		out = append(out, d)
	}
	return out, nil
}

// DeliveryAttempts implements ports.DeliveryRecords.
func (s *Store) DeliveryAttempts(_ context.Context, id string) ([]domain.Attempt, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.deliveries[id]; !ok {
		return nil, fmt.Errorf("list attempts of delivery %s: %w", id, domain.ErrNotFound)
	}
	return append([]domain.Attempt{}, s.attempts[id]...), nil
}

// rollUp settles the event's status once every delivery is terminal: failed
// if any is dead, delivered otherwise (also when it has none left).
func (s *Store) rollUp(eventID string) {
	status := domain.EventDelivered
	for _, did := range s.eventDeliveries[eventID] {
		switch st := s.deliveries[did].delivery.Status; {
		case !st.Terminal():
			return
		case st == domain.DeliveryDead:
			status = domain.EventFailed
		}
	}
	s.events[eventID].event.Status = status
}

// GetDelivery implements ports.DeliveryRecords.
func (s *Store) GetDelivery(_ context.Context, id string) (domain.Delivery, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := s.deliveries[id]
	if !ok {
		return domain.Delivery{}, fmt.Errorf("get delivery %s: %w", id, domain.ErrNotFound)
	}
	return d.delivery, nil
}

// EventDeliveries implements ports.DeliveryRecords.
func (s *Store) EventDeliveries(_ context.Context, eventID string, p ports.Page) ([]domain.Delivery, error) {
	if p.Limit < 1 {
		return nil, fmt.Errorf("list deliveries of event %s: limit must be at least 1, got %d", eventID, p.Limit)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []domain.Delivery{}
	for _, d := range s.bySubscription(eventID) {
		if len(out) == p.Limit {
			break
		}
		if d.SubscriptionID > p.After {
			out = append(out, d)
		}
	}
	return out, nil
}

// EventAttempts implements ports.DeliveryRecords.
func (s *Store) EventAttempts(_ context.Context, eventID string, p ports.AttemptPage) ([]domain.Attempt, error) {
	if p.Limit < 1 {
		return nil, fmt.Errorf("list attempts of event %s: limit must be at least 1, got %d", eventID, p.Limit)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []domain.Attempt{}
	for _, d := range s.bySubscription(eventID) {
		if d.SubscriptionID < p.AfterSubscription {
			continue
		}
		for _, a := range s.attempts[d.ID] {
			if len(out) == p.Limit {
				return out, nil
			}
			if d.SubscriptionID > p.AfterSubscription || a.Number > p.AfterAttempt {
				out = append(out, a)
			}
		}
	}
	return out, nil
}

// bySubscription returns the deliveries of eventID in subscription id
// order; s.mu is held.
func (s *Store) bySubscription(eventID string) []domain.Delivery {
	out := make([]domain.Delivery, 0, len(s.eventDeliveries[eventID]))
	for _, id := range s.eventDeliveries[eventID] {
		out = append(out, s.deliveries[id].delivery)
	}
	slices.SortFunc(out, func(a, b domain.Delivery) int { return cmp.Compare(a.SubscriptionID, b.SubscriptionID) })
	return out
}

// DueDeliveries implements ports.DeliveryScan.
func (s *Store) DueDeliveries(_ context.Context, now time.Time, requeueAfter time.Duration, limit int) ([]ports.DueDelivery, error) {
	now = normalizeTime(now)
	enqueuedBefore := normalizeTime(now.Add(-requeueAfter))
	s.mu.Lock()
	defer s.mu.Unlock()
	var due []*storedDelivery
	for _, d := range s.deliveries {
		if d.delivery.Status.Terminal() || d.delivery.NextAttemptAt.After(now) || d.reservedUntil.After(now) {
			continue
		}
		if !d.enqueuedAt.IsZero() && d.enqueuedAt.After(enqueuedBefore) {
			continue
		}
		if !s.firstInLine(d.delivery) {
			continue
		}
		due = append(due, d)
	}
	slices.SortFunc(due, func(a, b *storedDelivery) int {
		return cmp.Or(a.delivery.NextAttemptAt.Compare(b.delivery.NextAttemptAt), cmp.Compare(a.delivery.ID, b.delivery.ID))
	})
	due = due[:min(len(due), max(limit, 0))]
	out := make([]ports.DueDelivery, len(due))
	for i, d := range due {
		d.enqueuedAt = now
		out[i] = ports.DueDelivery{ID: d.delivery.ID, SubscriptionID: d.delivery.SubscriptionID}
	}
	return out, nil
}

// normalizeTime keeps what PostgreSQL keeps: microseconds, no zone. Times
// given as arguments are normalized too, so comparisons happen at the
// precision PostgreSQL compares at.
func normalizeTime(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC().Truncate(time.Microsecond)
}

func copySubscription(sub domain.Subscription) domain.Subscription {
	sub.EventTypes = slices.Clone(sub.EventTypes)
	sub.Headers = maps.Clone(sub.Headers)
	if sub.Headers == nil {
		sub.Headers = map[string]string{}
	}
	sub.RetryPolicy.Schedule = slices.Clone(sub.RetryPolicy.Schedule)
	sub.PreviousSecretExpiresAt = normalizeTime(sub.PreviousSecretExpiresAt)
	sub.Timeout = sub.Timeout.Truncate(time.Microsecond)
	sub.CreatedAt = normalizeTime(sub.CreatedAt)
	sub.UpdatedAt = normalizeTime(sub.UpdatedAt)
	return sub
}

func copyEvent(e domain.Event) domain.Event {
	e.Data = slices.Clone(e.Data)
	if e.Data == nil {
		e.Data = []byte{}
	}
	return e
}

func normalizeDelivery(d domain.Delivery) domain.Delivery {
	d.NextAttemptAt = normalizeTime(d.NextAttemptAt)
	d.CreatedAt = normalizeTime(d.CreatedAt)
	d.UpdatedAt = normalizeTime(d.UpdatedAt)
	return d
}

// MaintainHistory implements ports.Retention without windows: it removes
// every event made before now - retention that is fanned out and whose
// deliveries are all terminal, with those deliveries, their attempts and
// the event's idempotency key; Dropped counts the events removed, Waiting
// those kept for a live delivery. Nothing needs making ahead.
func (s *Store) MaintainHistory(_ context.Context, now time.Time, retention time.Duration) (ports.Maintenance, error) {
	if err := domain.ValidateRetention(retention); err != nil {
		return ports.Maintenance{}, err
	}
	cutoff := now.Add(-retention)
	s.mu.Lock()
	defer s.mu.Unlock()
	var done ports.Maintenance
	for id, e := range s.events {
		if !e.event.CreatedAt.Before(cutoff) {
			continue
		}
		live := !e.fannedOut
		for _, did := range s.eventDeliveries[id] {
			if d := s.deliveries[did]; d != nil && !d.delivery.Status.Terminal() {
				live = true
			}
		}
		if live {
			done.Waiting++
			continue
		}
		for _, did := range s.eventDeliveries[id] {
			delete(s.deliveries, did)
			delete(s.attempts, did)
		}
		delete(s.eventDeliveries, id)
		if key := e.event.IdempotencyKey; key != "" && s.idempotencyKeys[key] == id {
			delete(s.idempotencyKeys, key)
		}
		delete(s.events, id)
		done.Dropped++
	}
	return done, nil
}

// Partitions implements ports.Retention: the memory store has none.
func (s *Store) Partitions(context.Context) (map[string]int, error) { return nil, nil }
