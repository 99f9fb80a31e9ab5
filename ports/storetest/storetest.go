// Package storetest is the contract test suite of ports.Store. Every store
// adapter runs it (the watermill pubsub/tests idea), so the in-memory store
// behind `dispatch dev` and unit tests behaves like PostgreSQL:
//
//	func TestStore(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) ports.Store { return newStore(t) })
//	}
//
// Each test asks for its own empty store and runs in parallel; scans such as
// DueDeliveries and UnfannedEvents see the whole store, so sharing one would
// make their assertions racy.
//
// Rule of dependency: imports domain, ports, the standard library and
// testify; no adapter. Adapters import it from their tests.
package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// Run runs the contract suite. newStore returns a fresh, empty store for one
// test; it is called once per test, from parallel tests.
func Run(t *testing.T, newStore func(t *testing.T) ports.Store) {
	t.Run("Subscriptions", func(t *testing.T) { t.Parallel(); testSubscriptions(t, newStore) })
	t.Run("Events", func(t *testing.T) { t.Parallel(); testEvents(t, newStore) })
	t.Run("InlineFanOut", func(t *testing.T) { t.Parallel(); testInlineFanOut(t, newStore) })
	t.Run("Deliveries", func(t *testing.T) { t.Parallel(); testDeliveries(t, newStore) })
	t.Run("Release", func(t *testing.T) { t.Parallel(); testRelease(t, newStore) })
	t.Run("Reservation", func(t *testing.T) { t.Parallel(); testReservation(t, newStore) })
	t.Run("Recovery", func(t *testing.T) { t.Parallel(); testRecovery(t, newStore) })
	t.Run("Listing", func(t *testing.T) { t.Parallel(); testListing(t, newStore) })
	t.Run("Deletion", func(t *testing.T) { t.Parallel(); testDeletion(t, newStore) })
	t.Run("EventPages", func(t *testing.T) { t.Parallel(); testEventPages(t, newStore) })
	t.Run("Scheduler", func(t *testing.T) { t.Parallel(); testScheduler(t, newStore) })
	t.Run("Ordering", func(t *testing.T) { t.Parallel(); testOrdering(t, newStore) })
	t.Run("FanOutFailures", func(t *testing.T) { t.Parallel(); testFanOutFailures(t, newStore) })
	t.Run("Ping", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		require.NoError(t, f.store.Ping(f.ctx), "a store that was just opened is reachable")
	})
}

// everyDelivery and everyAttempt are pages larger than any test's event,
// for tests about something else than paging.
var (
	everyDelivery = ports.Page{Limit: 1000}
	everyAttempt  = ports.AttemptPage{Limit: 1000}
)

// base is the suite's "now": in a non-UTC zone and with nanoseconds, so
// every test checks that times come back in UTC at microsecond precision.
var base = time.Date(2031, 3, 4, 5, 6, 7, 891_234_567, time.FixedZone("CET", 3600))

// fixture is one test's store and helpers that write to it.
type fixture struct {
	t     *testing.T
	ctx   context.Context
	store ports.Store
}

func newFixture(t *testing.T, newStore func(t *testing.T) ports.Store) *fixture {
	t.Helper()
	return &fixture{t: t, ctx: t.Context(), store: newStore(t)}
}

// us is t as a store returns it.
func us(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.UTC().Truncate(time.Microsecond)
}

// newSubscription returns a valid, active subscription created at now with
// every optional field left at its default.
func newSubscription(now time.Time) domain.Subscription {
	return domain.Subscription{
		ID:          domain.MustNewID(domain.SubscriptionIDPrefix, now),
		URL:         "https://hooks.example.com/dispatch",
		EventTypes:  []string{"order.*"},
		Secret:      domain.MustGenerateSecret(),
		Active:      true,
		RateLimit:   domain.DefaultRateLimit,
		MaxInFlight: domain.DefaultMaxInFlight,
		Timeout:     domain.DefaultTimeout,
		RetryPolicy: domain.DefaultRetryPolicy(),
		Headers:     map[string]string{},
		CreatedAt:   now,
		UpdatedAt:   now,
	}
}

// wantSubscription is sub as a store returns it.
func wantSubscription(sub domain.Subscription) domain.Subscription {
	sub.CreatedAt = us(sub.CreatedAt)
	sub.UpdatedAt = us(sub.UpdatedAt)
	sub.PreviousSecretExpiresAt = us(sub.PreviousSecretExpiresAt)
	sub.Timeout = sub.Timeout.Truncate(time.Microsecond)
	if sub.Headers == nil {
		sub.Headers = map[string]string{}
	}
	return sub
}

// subscription stores a new subscription, changed by mods first.
func (f *fixture) subscription(mods ...func(*domain.Subscription)) domain.Subscription {
	f.t.Helper()
	sub := newSubscription(base)
	for _, mod := range mods {
		mod(&sub)
	}
	require.NoError(f.t, f.store.CreateSubscription(f.ctx, sub))
	return wantSubscription(sub)
}

// newEvent returns a pending order.created event created at now.
func newEvent(now time.Time) domain.Event {
	return domain.Event{
		ID:        domain.MustNewID(domain.EventIDPrefix, now),
		Type:      "order.created",
		Source:    "shop",
		Data:      []byte(`{"order_id":"ord_1","total":12.50}`),
		Status:    domain.EventPending,
		CreatedAt: now,
	}
}

// wantEvent is e as a store returns it.
func wantEvent(e domain.Event) domain.Event {
	e.CreatedAt = us(e.CreatedAt)
	return e
}

// event stores a new event created at base, changed by mods first.
func (f *fixture) event(mods ...func(*domain.Event)) domain.Event {
	f.t.Helper()
	e := newEvent(base)
	for _, mod := range mods {
		mod(&e)
	}
	stored, created, err := f.store.CreateEvent(f.ctx, e, base.Add(-time.Hour))
	require.NoError(f.t, err)
	require.True(f.t, created, "event %s should be new", e.ID)
	return stored
}

// newDelivery returns a pending delivery of e to sub, due at now, with the
// ordering key sub resolves for e (none unless sub.OrderingKey is set).
func newDelivery(e domain.Event, sub domain.Subscription, now time.Time) domain.Delivery {
	return domain.Delivery{
		ID:             domain.MustNewID(domain.DeliveryIDPrefix, now),
		EventID:        e.ID,
		SubscriptionID: sub.ID,
		Status:         domain.DeliveryPending,
		NextAttemptAt:  now,
		OrderingKey:    domain.OrderingKeyFor(sub, e),
		CreatedAt:      now,
		UpdatedAt:      now,
	}
}

// wantDelivery is d as a store returns it.
func wantDelivery(d domain.Delivery) domain.Delivery {
	d.NextAttemptAt = us(d.NextAttemptAt)
	d.CreatedAt = us(d.CreatedAt)
	d.UpdatedAt = us(d.UpdatedAt)
	return d
}

// fanOut records the fan-out of e to subs, with deliveries created and due
// at now, and returns them as the store holds them.
func (f *fixture) fanOut(e domain.Event, now time.Time, subs ...domain.Subscription) []domain.Delivery {
	f.t.Helper()
	fo := ports.FanOut{EventID: e.ID}
	for _, sub := range subs {
		fo.Deliveries = append(fo.Deliveries, newDelivery(e, sub, now))
	}
	created, err := f.store.CreateDeliveries(f.ctx, []ports.FanOut{fo})
	require.NoError(f.t, err)
	require.Len(f.t, created, len(subs))
	out := make([]domain.Delivery, len(fo.Deliveries))
	for i, d := range fo.Deliveries {
		out[i] = wantDelivery(d)
	}
	return out
}

// claim claims d at now for a 30 s lease and returns the claimed delivery.
func (f *fixture) claim(d domain.Delivery, now time.Time) domain.Delivery {
	f.t.Helper()
	c, err := f.store.ClaimDelivery(f.ctx, d.ID, now, leaseMargin(now, now.Add(30*time.Second)))
	require.NoError(f.t, err)
	return c.Delivery
}

// outcome describes an attempt's result for record.
type outcome struct {
	status     domain.DeliveryStatus
	statusCode int
	next       time.Time
	err        string
}

// record records attempt number d.Attempts+1 of d ending in o at now and
// returns the delivery and attempt as the store holds them. An unordered
// delivery must let no other delivery go.
func (f *fixture) record(d domain.Delivery, now time.Time, o outcome) (domain.Delivery, domain.Attempt) {
	f.t.Helper()
	d, a, next := f.recordNext(d, now, o)
	if d.OrderingKey == "" {
		assert.Empty(f.t, next, "an unordered delivery lets nothing go")
	}
	return d, a
}

// recordNext is record that also returns the deliveries the attempt let
// go (RecordAttempt's next).
func (f *fixture) recordNext(d domain.Delivery, now time.Time, o outcome) (domain.Delivery, domain.Attempt, []string) {
	f.t.Helper()
	d, a := attemptOf(d, now, o)
	next, err := f.store.RecordAttempt(f.ctx, d, a)
	require.NoError(f.t, err)
	return wantDelivery(d), wantAttempt(a), next
}

// attemptOf is the next attempt of d ending in o, and d after it.
func attemptOf(d domain.Delivery, now time.Time, o outcome) (domain.Delivery, domain.Attempt) {
	d.Status = o.status
	d.Attempts++
	d.NextAttemptAt = o.next
	if o.next.IsZero() {
		d.NextAttemptAt = now
	}
	d.LastStatusCode = o.statusCode
	d.LastError = o.err
	d.Reason = ""
	d.UpdatedAt = now
	a := domain.Attempt{
		DeliveryID:     d.ID,
		SubscriptionID: d.SubscriptionID,
		Number:         d.Attempts,
		StatusCode:     o.statusCode,
		ResponseBody:   "ok",
		Error:          o.err,
		Duration:       12*time.Millisecond + 345*time.Nanosecond,
		CreatedAt:      now,
	}
	return d, a
}

// wantAttempt is a as a store returns it.
func wantAttempt(a domain.Attempt) domain.Attempt {
	a.Duration = a.Duration.Truncate(time.Microsecond)
	a.CreatedAt = us(a.CreatedAt)
	return a
}

// ids returns the ids of deliveries.
func ids(deliveries []domain.Delivery) []string {
	out := make([]string, len(deliveries))
	for i, d := range deliveries {
		out[i] = d.ID
	}
	return out
}

// leaseMargin is the ClaimDelivery margin that makes a claim at now lease
// until until, for the fixture's subscriptions (default timeout).
func leaseMargin(now, until time.Time) time.Duration {
	return until.Sub(now) - domain.DefaultTimeout
}
