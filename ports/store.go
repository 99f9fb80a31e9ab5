package ports

import (
	"context"
	"fmt"
	"time"

	"github.com/dispatch-webhooks/dispatch/domain"
)

// Page asks for one page of a list ordered by id (ids sort by creation
// time), or by the key the method names. After is the last key of the
// previous page ("" for the first); Limit is at least 1.
type Page struct {
	After string
	Limit int
}

// AttemptPage asks for one page of an event's attempts, which are ordered
// by subscription id then attempt number (an event has at most one
// delivery per subscription). AfterSubscription and AfterAttempt are the
// last attempt of the previous page ("" and 0 for the first); Limit is at
// least 1.
type AttemptPage struct {
	AfterSubscription string
	AfterAttempt      int
	Limit             int
}

// SubscriptionStore keeps subscriptions. All methods are safe for concurrent
// use. Times round-trip at microsecond precision.
type SubscriptionStore interface {
	// CreateSubscription stores s; s.ID is new. Returns domain.ErrConflict if
	// the id exists.
	CreateSubscription(ctx context.Context, s domain.Subscription) error
	// GetSubscription returns domain.ErrNotFound when id does not exist.
	GetSubscription(ctx context.Context, id string) (domain.Subscription, error)
	// ListSubscriptions returns up to p.Limit subscriptions with id > p.After
	// in id order.
	ListSubscriptions(ctx context.Context, p Page) ([]domain.Subscription, error)
	// UpdateSubscription loads id, calls update on it and stores the result,
	// atomically with respect to other updates of id. If update returns an
	// error nothing is stored and that error is returned. Returns
	// domain.ErrNotFound when id does not exist.
	UpdateSubscription(ctx context.Context, id string, update func(*domain.Subscription) error) (domain.Subscription, error)
	// DeleteSubscription removes id together with its deliveries and their
	// attempts, in steps of at most batch deliveries, each its own short
	// transaction: the caller calls it again until it returns done. The
	// first call marks the subscription deleted; from then on every read
	// treats it as gone (GetSubscription, UpdateSubscription and
	// RecoverDeliveries return domain.ErrNotFound, ListSubscriptions leaves
	// it out), it is no longer active (ActiveSubscriptions leaves it out, and
	// a claim of one of its deliveries returns it inactive), and a change to
	// subscriptions is recorded as for any update. Each call then deletes up
	// to batch of its deliveries with their attempts, and rolls up the
	// status of their events (an event whose other deliveries are all
	// terminal becomes delivered or failed); once none is left it deletes
	// the subscription and returns done. A deletion interrupted midway
	// leaves the subscription marked, and calling DeleteSubscription again
	// resumes it. Returns domain.ErrNotFound when id does not exist (also
	// once its deletion is done).
	DeleteSubscription(ctx context.Context, id string, batch int) (done bool, err error)
	// ActiveSubscriptions returns every active subscription.
	ActiveSubscriptions(ctx context.Context) ([]domain.Subscription, error)
	// SubscriptionChanges tells what changed among subscriptions after the
	// cursor since, for a copy kept up to date by changes rather than
	// loaded whole. It calls changed with every subscription created or
	// updated after since, as it is now (active or not), a page of at most
	// a few hundred at a time (so a copy of many subscriptions is loaded
	// without holding them all twice; changed may keep the elements, not
	// the slice), then returns the ids of those deleted after since and
	// the cursor the changes end at. since 0 asks for everything: changed
	// gets every active subscription, and no deletion is returned.
	//
	// A copy of the active subscriptions up to date at since, with each
	// changed subscription put into it (an inactive one taken out) and
	// then the deleted ones taken out, is up to date at the returned
	// Cursor, which covers every change committed before the call. It may
	// hold some later changes as well, which a later call tells again
	// (putting a subscription twice is harmless). Cursors grow with every
	// change; when nothing changed since, changed is not called and Cursor
	// is since.
	SubscriptionChanges(ctx context.Context, since int64, changed func([]domain.Subscription)) (SubscriptionChanges, error)
	// MatchActive calls match with an index of the active subscriptions
	// that holds every change committed before the call. The index is the
	// store's own copy, kept up to date by changes (see
	// SubscriptionChanges), so that a process holds one index however many
	// of its stages match events: match may read it only during the call,
	// must not change it, and must not call back into the store.
	MatchActive(ctx context.Context, match func(*domain.SubscriptionIndex)) error
}

// SubscriptionChanges ends what SubscriptionStore.SubscriptionChanges
// tells.
type SubscriptionChanges struct {
	// Deleted are the ids of the subscriptions deleted.
	Deleted []string
	// Cursor is where the changes end, for the next call.
	Cursor int64
}

// SubscriptionDeletions is what the scheduler needs to finish the
// deletions of subscriptions that were interrupted (the process deleting
// one died midway). It is safe for concurrent use.
type SubscriptionDeletions interface {
	// UnfinishedDeletions returns up to limit subscriptions whose deletion
	// is under way (marked by DeleteSubscription and not done), longest
	// under way first.
	UnfinishedDeletions(ctx context.Context, limit int) ([]string, error)
	// DeleteSubscription is SubscriptionStore.DeleteSubscription.
	DeleteSubscription(ctx context.Context, id string, batch int) (done bool, err error)
}

// EventStore keeps events. All methods are safe for concurrent use.
type EventStore interface {
	// CreateEvent stores e unless e.IdempotencyKey is non-empty and an event
	// with that key was stored after keptSince; then it stores nothing and
	// returns that earlier event with created false. Two concurrent calls
	// with one key store exactly one event. When CreateEvent returns, the
	// event is durable.
	CreateEvent(ctx context.Context, e domain.Event, keptSince time.Time) (stored domain.Event, created bool, err error)
	// CreateEventFannedOut stores e, which has no idempotency key, like
	// CreateEvent, and fans it out in the same transaction (SPEC §2: inline
	// fan-out, for events with few matching subscriptions): it calls inline
	// with e and an index of the subscriptions active at that moment, which
	// inline may read only during the call. When inline returns ok, e is
	// stored fanned out together with the deliveries it returned (which
	// count as enqueued at their CreatedAt, and are stored reserved when
	// they carry a reservation, as with DeliveryFanOut.CreateDeliveries),
	// and their ids are returned with fannedOut true. Otherwise e is stored
	// as CreateEvent stores it, for the fan-out stage. inline may be called more than once (a retried write); it must
	// be a pure function of its arguments. Returns domain.ErrConflict when
	// the id exists.
	CreateEventFannedOut(ctx context.Context, e domain.Event, inline InlineFanOut) (deliveries []string, fannedOut bool, err error)
	// GetEvent returns domain.ErrNotFound when id does not exist.
	GetEvent(ctx context.Context, id string) (domain.Event, error)
	// GetEvents returns the events with the given ids that exist, in any
	// order.
	GetEvents(ctx context.Context, ids []string) ([]domain.Event, error)
	// UnfannedEvents is the outbox sweep. It picks up to limit events whose
	// fan-out has not been recorded (CreateDeliveries was never called for
	// them) and that were neither created nor picked by an earlier sweep
	// after now-requeueAfter, oldest first. It marks them picked at now and
	// returns them, skipping rows another caller holds, so concurrent
	// sweeps never return the same event and a slow fan-out is not flooded
	// with copies.
	UnfannedEvents(ctx context.Context, now time.Time, requeueAfter time.Duration, limit int) ([]string, error)
	// FailFanOut records a failed try to fan out event id, which is not
	// fanned out: it counts the try, and when that makes maxTries tries,
	// it settles the event as failed with reason (domain.Event's
	// FailureReason, status failed): fanned out at now with no deliveries,
	// so it is never picked by UnfannedEvents again nor holds an ordered
	// delivery back. It returns whether it settled the event. An event
	// already fanned out is left as it is (settled false). The count is
	// durable: tries made by any process add up. Returns
	// domain.ErrNotFound when the event does not exist.
	FailFanOut(ctx context.Context, id, reason string, now time.Time, maxTries int) (settled bool, err error)
	// ExpireIdempotencyKeys frees the idempotency keys whose window ended:
	// up to limit keys of events created at or before keptSince, oldest
	// first. Their events stay, and still tell the key they were published
	// with, but no longer answer for it: a later event takes it, whatever
	// its window. It returns how many it freed; concurrent calls free
	// different keys.
	ExpireIdempotencyKeys(ctx context.Context, keptSince time.Time, limit int) (int, error)
}

// The delivery stores keep deliveries and their attempts, one interface
// per caller so that each use case depends only on what it calls: the
// fan-out stage records deliveries (DeliveryFanOut), the worker claims and
// settles them (DeliveryClaims), the scheduler finds the due ones
// (DeliveryScan), and the operator reads and replays them
// (DeliveryRecords). Store holds them all, as one backend implements them.
// All methods are safe for concurrent use.

// DeliveryFanOut is what the fan-out stage needs: recording the deliveries
// fan-out made for events.
type DeliveryFanOut interface {
	// CreateDeliveries records the fan-out of each event in fanouts: it
	// stores its deliveries and marks the event fanned out, all in one
	// transaction. An event with no deliveries becomes delivered. A
	// delivery to a subscription that does not exist (deleted since it was
	// matched) is left out. A
	// delivery with ReservedUntil after its CreatedAt is stored reserved
	// until then (see DeliveryClaims.ClaimDelivery). It is
	// idempotent: an event already fanned out is skipped (its deliveries are
	// not created twice), and the ids of deliveries actually created are
	// returned. Created deliveries count as enqueued at their CreatedAt (the
	// caller appends them to the queue right after).
	//
	// A fan-out the store refuses for what it holds (a delivery id that
	// exists, a value a column cannot store) fails alone: the others are
	// recorded, their created ids are returned, and so is a
	// *RejectedFanOuts error naming each refused event with the reason; a
	// refused event is left as it was (not fanned out). Any other error
	// says nothing of what was recorded, as for a lost reply.
	CreateDeliveries(ctx context.Context, fanouts []FanOut) (created []string, err error)
}

// DeliveryClaims is the worker's hot path: claim (or take) a delivery,
// then record its attempt or release it without one.
type DeliveryClaims interface {
	// ClaimDelivery moves delivery id to delivering with a lease until now
	// plus its subscription's timeout plus leaseMargin (stored as its
	// NextAttemptAt, so an expired lease makes it due again: a worker that
	// died mid-attempt holds it no longer than one attempt could take), and
	// returns it with its event and subscription. Only a
	// non-terminal delivery whose NextAttemptAt is at or before now can be
	// claimed: a pending or retrying one that is due, or a delivering one
	// whose lease expired (its worker died).
	//
	// An ordered delivery (non-empty OrderingKey) is also held back while
	// it is not first in line, and only by deliveries of its own
	// subscription and key (SPEC §3): while a delivery of the same
	// subscription and key for an earlier event (smaller event id) is not
	// terminal, or while an earlier event that could get one is not fanned
	// out yet (its deliveries may not exist yet): one that matches the
	// subscription's event types and resolves to the same key
	// (domain.FirstInLine states the rule). A store that cannot resolve a key
	// exactly (a pointer into data) may take it to be the same: ordering
	// is then delayed, never broken. Another subscription's events, an
	// event of a type the subscription does not match and an event settled
	// as failed (FailFanOut) hold nothing back. A held delivery is left as
	// it was except that its enqueued mark is cleared, so the scheduler's
	// scan enqueues it once it is first in line.
	//
	// A delivery reserved by its creator (domain.Delivery.ReservedUntil)
	// cannot be claimed before its reservation ends: it is reserved to the
	// holder of the creator's queue entry, who takes it (TakeDelivery).
	//
	// It returns domain.ErrNotFound when the delivery does not exist and
	// domain.ErrConflict otherwise.
	ClaimDelivery(ctx context.Context, id string, now time.Time, leaseMargin time.Duration) (Claimed, error)
	// TakeDelivery is ClaimDelivery for the holder of the queue entry the
	// delivery's creator appended, who alone may act on its reservation.
	// fresh is the delivery as its creator stored it, as far as that entry
	// tells: ID, EventID, SubscriptionID, CreatedAt and ReservedUntil, the
	// rest as domain.NewDelivery makes them (an entry that tells only the
	// id leaves the rest zero).
	// When the delivery is reserved until at least now plus its
	// subscription's timeout plus leaseMargin (as long as a claim's lease)
	// and unordered, it is returned as it is stored, without a write: the
	// reservation is the lease, and it stays pending to every reader.
	// Otherwise it is claimed as ClaimDelivery claims it, its reservation
	// (too short to attempt within) not standing in the way. Claiming,
	// recording an outcome and releasing end a reservation.
	//
	// A store may answer from fresh without reading the delivery: until
	// its reservation ends, a reserved delivery changes only by its
	// holder's hand, or goes with its subscription. The subscription and
	// the event it returns are as they are when it is called (a change
	// committed before is seen), so a deleted subscription still gives
	// domain.ErrNotFound and a disabled one is returned disabled. An entry
	// appended twice (a retried append whose answer was lost) may then be
	// taken twice, even after the first holder recorded an outcome.
	TakeDelivery(ctx context.Context, fresh domain.Delivery, now time.Time, leaseMargin time.Duration) (Claimed, error)
	// RecordAttempt stores the attempt and the delivery's new state (status,
	// attempts, next attempt time, last status code and error) in one
	// transaction, and when the delivery became terminal and every delivery
	// of its event is terminal, sets the event's status (delivered, or failed
	// if any is dead). It clears the delivery's enqueued mark, so the
	// scheduler's scan picks a retrying delivery up as soon as it is due.
	// When an ordered delivery became terminal, it returns the ids of the
	// deliveries that are now first in line behind it (at most one per
	// ordering key: the next of the same subscription and key), so the
	// caller can enqueue them at once. Returns domain.ErrNotFound when the
	// delivery does not exist.
	RecordAttempt(ctx context.Context, d domain.Delivery, a domain.Attempt) (next []string, err error)
	// ReleaseDelivery stores a claimed delivery's new state without an
	// attempt: a postponement (throttled, circuit open: status back to
	// pending or retrying, a later NextAttemptAt, a Reason) or a settlement
	// that needs no request (dead because the subscription is disabled). It
	// writes Status, NextAttemptAt, Reason, LastError and UpdatedAt, clears
	// the enqueued mark, and rolls the event's status up like RecordAttempt
	// when the delivery became terminal, and then returns the next in line
	// like RecordAttempt. Returns domain.ErrNotFound when the delivery does
	// not exist.
	ReleaseDelivery(ctx context.Context, d domain.Delivery) (next []string, err error)
}

// DeliveryScan is what the scheduler needs to enqueue the deliveries that
// are due and not waiting in the queue.
type DeliveryScan interface {
	// DueDeliveries is the scheduler's scan. It picks up to limit
	// non-terminal deliveries, neither leased nor reserved, whose
	// NextAttemptAt is at or before now and that were not enqueued after
	// now-requeueAfter (a due retry, a delivery whose append to the queue
	// was lost, a delivering one whose lease or reservation expired),
	// oldest NextAttemptAt first, leaving out ordered deliveries held back
	// (see DeliveryClaims.ClaimDelivery). It marks them enqueued at now and
	// returns them, skipping rows another caller holds, so concurrent
	// scans never return the same delivery.
	DueDeliveries(ctx context.Context, now time.Time, requeueAfter time.Duration, limit int) ([]DueDelivery, error)
}

// DueDelivery is a delivery the scheduler's scan made due: its id, and its
// subscription's, which keys its entry in the delivery stream.
type DueDelivery struct {
	ID, SubscriptionID string
}

// DeliveryRecords is the operator's side: reads of deliveries and their
// attempts, and replays of dead deliveries.
type DeliveryRecords interface {
	// GetDelivery returns domain.ErrNotFound when id does not exist.
	GetDelivery(ctx context.Context, id string) (domain.Delivery, error)
	// ListDeliveries returns up to p.Limit deliveries matching f with id >
	// p.After, in id order. Zero fields of f match everything.
	ListDeliveries(ctx context.Context, f DeliveryFilter, p Page) ([]domain.Delivery, error)
	// DeliveryAttempts returns the attempts of delivery id in attempt order,
	// or domain.ErrNotFound when the delivery does not exist.
	DeliveryAttempts(ctx context.Context, id string) ([]domain.Attempt, error)
	// EventDeliveries returns up to p.Limit deliveries of eventID whose
	// subscription id is above p.After, in subscription id order (none if
	// the event has none or does not exist). The order is the one the
	// (event, subscription) uniqueness already indexes, so a page of an
	// event with any number of deliveries reads only that page.
	EventDeliveries(ctx context.Context, eventID string, p Page) ([]domain.Delivery, error)
	// EventAttempts returns up to p.Limit attempts of the deliveries of
	// eventID that come after (p.AfterSubscription, p.AfterAttempt),
	// ordered by subscription id then attempt number.
	EventAttempts(ctx context.Context, eventID string, p AttemptPage) ([]domain.Attempt, error)
	// RetryDelivery makes a dead delivery, or a retrying one, due at now
	// again (status retrying, NextAttemptAt now, Reason and enqueued mark
	// cleared) and sets its event back to pending. The policy then grants it
	// one more attempt. Returns the updated delivery, domain.ErrNotFound when
	// it does not exist, and domain.ErrConflict when it is pending,
	// delivering or delivered.
	RetryDelivery(ctx context.Context, id string, now time.Time) (domain.Delivery, error)
	// RecoverDeliveries is one batch of a subscription's recovery, in one
	// short transaction: it looks at up to p.Limit dead deliveries of
	// subscriptionID with id above p.After whose last update (the moment
	// they died) is at or after since, in id order, and does what
	// RetryDelivery does to those still dead. The caller passes Next as
	// the following batch's p.After until it is "", so a recovery of any
	// size holds no lock for longer than one batch, and a delivery that
	// dies again meanwhile is not recovered twice. Returns
	// domain.ErrNotFound when the subscription does not exist.
	RecoverDeliveries(ctx context.Context, subscriptionID string, since, now time.Time, p Page) (Recovered, error)
}

// DeliveryFilter narrows ListDeliveries.
type DeliveryFilter struct {
	SubscriptionID string
	EventID        string
	Status         domain.DeliveryStatus
}

// Recovered is one batch of DeliveryRecords.RecoverDeliveries.
type Recovered struct {
	// IDs are the deliveries made due again, in id order.
	IDs []string
	// Next is the last delivery the batch looked at, where the next batch
	// starts; "" when the batch found fewer than its limit, so none
	// follows.
	Next string
}

// InlineFanOut decides the deliveries of a new event from the index of the
// active subscriptions, inside CreateEventFannedOut. ok false leaves the
// event to the fan-out stage (it matches too many subscriptions to be
// fanned out while the producer waits).
type InlineFanOut func(e domain.Event, active *domain.SubscriptionIndex) (deliveries []domain.Delivery, ok bool)

// RejectedFanOuts is DeliveryFanOut.CreateDeliveries' error when the store
// refused the fan-out of some events for what they hold, and recorded the
// others.
type RejectedFanOuts struct {
	// Reasons says, by event id, why each refused fan-out was refused.
	Reasons map[string]string
}

// Error lists how many fan-outs were refused, and one reason.
func (e *RejectedFanOuts) Error() string {
	for id, reason := range e.Reasons {
		if len(e.Reasons) == 1 {
			return fmt.Sprintf("fan-out of event %s refused: %s", id, reason)
		}
		return fmt.Sprintf("fan-out of %d events refused, of event %s: %s", len(e.Reasons), id, reason)
	}
	return "no fan-out refused"
}

// FanOut is one event with the deliveries fan-out made for it.
type FanOut struct {
	EventID    string
	Deliveries []domain.Delivery
}

// Claimed is a delivery taken for an attempt, with what the attempt needs.
type Claimed struct {
	Delivery     domain.Delivery
	Event        domain.Event
	Subscription domain.Subscription
}

// Store is every store port; adapters implement all of them on one backend.
type Store interface {
	SubscriptionStore
	SubscriptionDeletions
	EventStore
	DeliveryFanOut
	DeliveryClaims
	DeliveryScan
	DeliveryRecords
	// Ping reports whether the backend is reachable (readiness).
	Ping(ctx context.Context) error
}
