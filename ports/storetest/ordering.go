package storetest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// testOrdering checks SPEC §3's ordering: deliveries with one subscription
// and ordering key reach the endpoint in event order.
func testOrdering(t *testing.T, newStore func(t *testing.T) ports.Store) {
	t.Run("HeldWhileAnEarlierDeliveryOfItsKeyIsNotTerminal", func(t *testing.T) {
		t.Parallel()
		cases := []struct {
			earlier  domain.DeliveryStatus
			wantHeld bool
		}{
			{earlier: domain.DeliveryPending, wantHeld: true},
			{earlier: domain.DeliveryDelivering, wantHeld: true},
			{earlier: domain.DeliveryRetrying, wantHeld: true},
			{earlier: domain.DeliveryDelivered, wantHeld: false},
			{earlier: domain.DeliveryDead, wantHeld: false},
		}
		for _, tc := range cases {
			t.Run(string(tc.earlier), func(t *testing.T) {
				t.Parallel()
				f := newFixture(t, newStore)
				sub := f.orderedSubscription()
				e1, e2 := f.customerEvent("c1"), f.customerEvent("c1")
				// Fanned out in reverse, so the later event's delivery has
				// the smaller id: the order is the events', not the
				// deliveries'.
				d2 := f.fanOut(e2, base, sub)[0]
				d1 := f.fanOut(e1, base, sub)[0]
				require.Equal(t, "c1", d1.OrderingKey, "fixture: the subscription orders by customer")
				require.Less(t, d2.ID, d1.ID, "fixture: delivery ids run against event order")
				f.bringTo(d1, tc.earlier)

				now := base.Add(time.Second)
				c, err := f.store.ClaimDelivery(f.ctx, d2.ID, now, leaseMargin(now, now.Add(30*time.Second)))
				if tc.wantHeld {
					assert.ErrorIs(t, err, domain.ErrConflict, "held while the earlier delivery is %s", tc.earlier)
					got, err := f.store.GetDelivery(f.ctx, d2.ID)
					require.NoError(t, err)
					assert.Equal(t, d2, got, "a held delivery is left as it was")
					return
				}
				require.NoError(t, err, "claimable once the earlier delivery is %s", tc.earlier)
				assert.Equal(t, domain.DeliveryDelivering, c.Delivery.Status)
			})
		}
	})

	t.Run("OnlyTheSameSubscriptionAndKeyHoldADelivery", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		sub, otherSub, unordered := f.orderedSubscription(), f.orderedSubscription(), f.subscription()
		first, otherKey, otherSubscription, noKey := f.customerEvent("c1"), f.customerEvent("c2"), f.customerEvent("c1"), f.customerEvent("c1")
		f.event() // awaits fan-out, which holds later ordered deliveries only
		late := f.customerEvent("c1")
		// A pending delivery of c1 to sub holds later c1 deliveries to sub.
		f.fanOut(first, base, sub)
		cases := []struct {
			name string
			d    domain.Delivery
		}{
			{"another key", f.fanOut(otherKey, base, sub)[0]},
			{"another subscription with the same key", f.fanOut(otherSubscription, base, otherSub)[0]},
			{"an unordered subscription", f.fanOut(noKey, base, unordered)[0]},
			{"unordered, after an event awaiting fan-out", f.fanOut(late, base, unordered)[0]},
		}
		for _, tc := range cases {
			_, err := f.store.ClaimDelivery(f.ctx, tc.d.ID, base, leaseMargin(base, base.Add(30*time.Second)))
			assert.NoError(t, err, "%s is not held", tc.name)
		}
	})

	t.Run("HeldWhileAnEarlierEventAwaitsFanOut", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		sub, unordered := f.orderedSubscription(), f.subscription()
		// Two fan-out workers can commit out of order: the earlier event's
		// deliveries may not exist yet when the later one's do.
		earlier := f.customerEvent("c1")
		ds := f.fanOut(f.customerEvent("c1"), base, sub, unordered)
		ordered, plain := ds[0], ds[1]

		_, err := f.store.ClaimDelivery(f.ctx, ordered.ID, base, leaseMargin(base, base.Add(30*time.Second)))
		assert.ErrorIs(t, err, domain.ErrConflict, "held until the earlier event is fanned out")
		_, err = f.store.ClaimDelivery(f.ctx, plain.ID, base, leaseMargin(base, base.Add(30*time.Second)))
		assert.NoError(t, err, "an unordered delivery is never held")

		// The earlier event turns out to have nothing for sub.
		f.fanOut(earlier, base, unordered)
		_, err = f.store.ClaimDelivery(f.ctx, ordered.ID, base, leaseMargin(base, base.Add(30*time.Second)))
		assert.NoError(t, err, "first in line once every earlier event is fanned out")
	})

	t.Run("HeldOnlyByEventsThatCouldJoinItsLine", func(t *testing.T) {
		t.Parallel()
		// Each case: an ordered delivery d behind one earlier event that
		// awaits fan-out. Only an event that could get a delivery of d's
		// subscription and key holds d back (SPEC §3): claims, the
		// scheduler's scan and the next-in-line lookup all agree.
		cases := []struct {
			name     string
			byKey    string // the subscription's ordering_key
			earlier  func(e *domain.Event)
			settle   bool // the earlier event is settled as failed first
			wantHeld bool
		}{
			{name: "same type and key", byKey: "/ordering_key",
				earlier: func(e *domain.Event) { e.OrderingKey = "k1" }, wantHeld: true},
			{name: "same type and key, by data", byKey: "/data/customer",
				earlier: func(e *domain.Event) { e.Data = []byte(`{"customer":"k1"}`) }, wantHeld: true},
			{name: "another subscription's type", byKey: "/ordering_key",
				earlier: func(e *domain.Event) { e.Type, e.OrderingKey = "invoice.paid", "k1" }},
			{name: "another subscription's type, by data", byKey: "/data/customer",
				earlier: func(e *domain.Event) { e.Type, e.Data = "invoice.paid", []byte(`{"customer":"k1"}`) }},
			{name: "another key", byKey: "/ordering_key",
				earlier: func(e *domain.Event) { e.OrderingKey = "k2" }},
			{name: "no key", byKey: "/ordering_key",
				earlier: func(e *domain.Event) { e.OrderingKey = "" }},
			{name: "another source", byKey: "/source",
				earlier: func(e *domain.Event) { e.Source = "k2" }},
			{name: "same source", byKey: "/source",
				earlier: func(e *domain.Event) { e.Source = "k1" }, wantHeld: true},
			{name: "same type, by type", byKey: "/type",
				earlier: func(e *domain.Event) {}, wantHeld: true},
			{name: "another type of the family, by type", byKey: "/type",
				earlier: func(e *domain.Event) { e.Type = "order.paid" }},
			{name: "by id, which no other event shares", byKey: "/id",
				earlier: func(e *domain.Event) {}},
			{name: "settled as failed", byKey: "/ordering_key",
				earlier: func(e *domain.Event) { e.OrderingKey = "k1" }, settle: true},
			{name: "settled as failed, by data", byKey: "/data/customer",
				earlier: func(e *domain.Event) { e.Data = []byte(`{"customer":"k1"}`) }, settle: true},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				f := newFixture(t, newStore)
				sub := f.subscription(func(s *domain.Subscription) { s.OrderingKey = tc.byKey })
				key := func(e *domain.Event) {
					e.OrderingKey, e.Source, e.Data = "k1", "k1", []byte(`{"customer":"k1"}`)
				}
				first := f.fanOut(f.event(key), base, sub)[0]
				earlier := f.event(tc.earlier)
				later := f.event(key)
				d := f.fanOut(later, base, sub)[0]
				require.Equal(t, domain.OrderingKeyFor(sub, later), d.OrderingKey, "fixture: the delivery's key")
				require.NotEmpty(t, d.OrderingKey, "fixture: an ordered delivery")
				if tc.settle {
					settled, err := f.store.FailFanOut(f.ctx, earlier.ID, "refused", base, 1)
					require.NoError(t, err)
					require.True(t, settled)
				}

				// The first delivery settles: d is next in line unless held.
				_, _, next := f.recordNext(f.claim(first, base), base, outcome{status: domain.DeliveryDelivered, statusCode: 200})
				now := base.Add(time.Hour)
				due, err := f.due(now, time.Minute, 10)
				require.NoError(t, err)
				_, claimErr := f.store.ClaimDelivery(f.ctx, d.ID, now, leaseMargin(now, now.Add(30*time.Second)))
				if tc.wantHeld {
					assert.Empty(t, next, "the next in line is held")
					assert.NotContains(t, due, d.ID, "a held delivery is not scanned")
					assert.ErrorIs(t, claimErr, domain.ErrConflict, "held behind an event that could join its line")
					return
				}
				if first.OrderingKey == d.OrderingKey {
					assert.Equal(t, []string{d.ID}, next, "the next in line goes")
				}
				assert.Contains(t, due, d.ID, "scanned: nothing holds it")
				assert.NoError(t, claimErr, "claimable: nothing holds it")
			})
		}
	})

	t.Run("HeldDeliveryIsScannedOnceFirstInLine", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		sub := f.orderedSubscription()
		d1 := f.fanOut(f.customerEvent("c1"), base, sub)[0]
		d2 := f.fanOut(f.customerEvent("c1"), base, sub)[0]
		// Leased for long enough that d1 is not due in any scan below.
		c, err := f.store.ClaimDelivery(f.ctx, d1.ID, base, leaseMargin(base, base.Add(time.Hour)))
		require.NoError(t, err)
		claimed := c.Delivery

		// Well inside requeueAfter of the creation-time enqueue: only the
		// mark the held claim cleared lets the scan see d2 at all.
		now := base.Add(time.Second)
		_, err = f.store.ClaimDelivery(f.ctx, d2.ID, now, leaseMargin(now, now.Add(30*time.Second)))
		require.ErrorIs(t, err, domain.ErrConflict, "held behind d1")
		due, err := f.due(now, requeueAfter, 10)
		require.NoError(t, err)
		assert.Empty(t, due, "a held delivery is not enqueued again and again")
		due, err = f.due(now.Add(requeueAfter), requeueAfter, 10)
		require.NoError(t, err)
		assert.Empty(t, due, "nor once its creation-time enqueue has expired")

		_, _, next := f.recordNext(claimed, now, outcome{status: domain.DeliveryDelivered, statusCode: 200})
		assert.Equal(t, []string{d2.ID}, next)
		due, err = f.due(now, requeueAfter, 10)
		require.NoError(t, err)
		assert.Equal(t, []string{d2.ID}, due, "first in line: the next scan enqueues it")
		_, err = f.store.ClaimDelivery(f.ctx, d2.ID, now, leaseMargin(now, now.Add(30*time.Second)))
		assert.NoError(t, err)
	})

	t.Run("TerminalOrderedDeliveryLetsTheNextGo", func(t *testing.T) {
		t.Parallel()
		type settle func(f *fixture, d domain.Delivery) []string
		byAttempt := func(status domain.DeliveryStatus) settle {
			return func(f *fixture, d domain.Delivery) []string {
				_, _, next := f.recordNext(f.claim(d, base), base, outcome{status: status, statusCode: 200, next: base.Add(time.Minute)})
				return next
			}
		}
		byRelease := func(status domain.DeliveryStatus, reason string) settle {
			return func(f *fixture, d domain.Delivery) []string {
				claimed := f.claim(d, base)
				claimed.Status, claimed.Reason = status, reason
				claimed.NextAttemptAt, claimed.UpdatedAt = base.Add(time.Minute), base
				next, err := f.store.ReleaseDelivery(f.ctx, claimed)
				require.NoError(f.t, err)
				return next
			}
		}
		cases := []struct {
			name   string
			settle settle
			// keys are the customers of the events after the first, which
			// is c1; unfanned names the one left awaiting fan-out (-1 for
			// none).
			keys     []string
			unfanned int
			// wantNext indexes keys; -1 for nothing.
			wantNext int
		}{
			{name: "delivered", settle: byAttempt(domain.DeliveryDelivered), keys: []string{"c1", "c1"}, unfanned: -1, wantNext: 0},
			{name: "dead", settle: byAttempt(domain.DeliveryDead), keys: []string{"c1"}, unfanned: -1, wantNext: 0},
			{name: "retrying: still first in line", settle: byAttempt(domain.DeliveryRetrying), keys: []string{"c1"}, unfanned: -1, wantNext: -1},
			{name: "released dead", settle: byRelease(domain.DeliveryDead, ""), keys: []string{"c1"}, unfanned: -1, wantNext: 0},
			{name: "released delivered", settle: byRelease(domain.DeliveryDelivered, ""), keys: []string{"c1"}, unfanned: -1, wantNext: 0},
			{name: "postponed: still first in line", settle: byRelease(domain.DeliveryPending, domain.ReasonThrottled), keys: []string{"c1"}, unfanned: -1, wantNext: -1},
			{name: "the last of its key", settle: byAttempt(domain.DeliveryDelivered), keys: []string{"c2"}, unfanned: -1, wantNext: -1},
			{name: "the next of its key, past other keys", settle: byAttempt(domain.DeliveryDelivered), keys: []string{"c2", "c1"}, unfanned: -1, wantNext: 1},
			{name: "the next waits for an earlier event's fan-out", settle: byAttempt(domain.DeliveryDead), keys: []string{"c1", "c1"}, unfanned: 0, wantNext: -1},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				f := newFixture(t, newStore)
				sub := f.orderedSubscription()
				first := f.fanOut(f.customerEvent("c1"), base, sub)[0]
				var later []domain.Delivery
				for i, key := range tc.keys {
					e := f.customerEvent(key)
					if i == tc.unfanned {
						later = append(later, domain.Delivery{})
						continue
					}
					later = append(later, f.fanOut(e, base, sub)[0])
				}
				next := tc.settle(f, first)
				if tc.wantNext < 0 {
					assert.Empty(t, next)
					return
				}
				assert.Equal(t, []string{later[tc.wantNext].ID}, next)
			})
		}
	})

	t.Run("UnorderedDeliveryLetsNothingGo", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		sub := f.subscription()
		d1 := f.fanOut(f.customerEvent("c1"), base, sub)[0]
		f.fanOut(f.customerEvent("c1"), base, sub)
		_, _, next := f.recordNext(f.claim(d1, base), base, outcome{status: domain.DeliveryDelivered, statusCode: 200})
		assert.Empty(t, next)
	})

	t.Run("ConcurrentWorkersClaimInEventOrder", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		sub, unordered := f.orderedSubscription(), f.subscription()
		const n, workers = 12, 4
		var fanouts []ports.FanOut
		var all []domain.Delivery
		var want []string
		for range n {
			e := f.customerEvent("c1")
			fo := ports.FanOut{EventID: e.ID, Deliveries: []domain.Delivery{newDelivery(e, sub, base), newDelivery(e, unordered, base)}}
			fanouts = append(fanouts, fo)
			all = append(all, fo.Deliveries...)
			want = append(want, e.ID)
		}

		var (
			mu      sync.Mutex
			claimed []string // event ids in the order their ordered deliveries were claimed
			settled atomic.Int32
			wg      sync.WaitGroup
		)
		// Fan-out runs alongside the workers, newest event first, the
		// worst order two fan-out workers could commit in.
		wg.Go(func() {
			for _, fo := range slices.Backward(fanouts) {
				_, err := f.store.CreateDeliveries(f.ctx, []ports.FanOut{fo})
				assert.NoError(t, err)
			}
		})
		for w := range workers {
			wg.Go(func() {
				order := slices.Clone(all)
				if w%2 == 1 {
					slices.Reverse(order) // latest first: tries to overtake
				}
				// Each pass settles at least the delivery first in line
				// once fan-out has created it; the deadline only stops a
				// broken store from spinning (a bound on passes failed on
				// a loaded machine, where fan-out can lag many passes).
				deadline := time.Now().Add(30 * time.Second)
				for pass := 0; settled.Load() < int32(len(all)); pass++ {
					if time.Now().After(deadline) {
						mu.Lock()
						t.Errorf("worker %d: waited for %d of %d deliveries to settle for %d passes; ordered ones claimed so far: %v", w, len(all)-int(settled.Load()), len(all), pass, claimed)
						mu.Unlock()
						return
					}
					for _, d := range order {
						c, err := f.store.ClaimDelivery(f.ctx, d.ID, base, leaseMargin(base, base.Add(time.Hour)))
						if err != nil {
							if !assert.True(t, isNotFoundOrConflict(err), "claim %s: %v", d.ID, err) {
								return
							}
							continue // not created yet, held, or already claimed
						}
						if c.Delivery.OrderingKey != "" {
							mu.Lock()
							claimed = append(claimed, c.Delivery.EventID)
							mu.Unlock()
						}
						settledD, a := attemptOf(c.Delivery, base, outcome{status: domain.DeliveryDelivered, statusCode: 200})
						if _, err := f.store.RecordAttempt(f.ctx, settledD, a); !assert.NoError(t, err) {
							return
						}
						settled.Add(1)
					}
				}
			})
		}
		wg.Wait()
		assert.Equal(t, want, claimed, "ordered deliveries are claimed in event order, each once")
	})
}

// orderedSubscription stores a subscription that orders deliveries by the
// event's data.customer.
func (f *fixture) orderedSubscription() domain.Subscription {
	f.t.Helper()
	return f.subscription(func(s *domain.Subscription) { s.OrderingKey = "/data/customer" })
}

// customerEvent stores an event for customer, which an ordered
// subscription's deliveries are keyed by.
func (f *fixture) customerEvent(customer string) domain.Event {
	f.t.Helper()
	return f.event(func(e *domain.Event) { e.Data = fmt.Appendf(nil, `{"customer":%q}`, customer) })
}

// bringTo moves a pending delivery d to status at base through the calls a
// worker makes.
func (f *fixture) bringTo(d domain.Delivery, status domain.DeliveryStatus) {
	f.t.Helper()
	switch status {
	case domain.DeliveryPending:
	case domain.DeliveryDelivering:
		f.claim(d, base)
	case domain.DeliveryRetrying:
		f.record(f.claim(d, base), base, outcome{status: status, statusCode: 503, next: base.Add(time.Minute)})
	default:
		f.record(f.claim(d, base), base, outcome{status: status, statusCode: 200})
	}
}

func isNotFoundOrConflict(err error) bool {
	return errors.Is(err, domain.ErrNotFound) || errors.Is(err, domain.ErrConflict)
}
