package postgres_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/dispatch-webhooks/dispatch/adapters/postgres"
	"github.com/dispatch-webhooks/dispatch/adapters/postgres/pgtest"
	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// Benchmarks of the store's hot paths against a real PostgreSQL:
//
//	go test -run '^$' -bench . ./adapters/postgres/
//
// SPEC §6 budgets a one-row commit at ~57 µs and a batched row at 10–25 µs
// on a 2-core machine; deliveries/s here is the store's share of the
// fan-out target (15,000 deliveries/s).

func benchSubscription(now time.Time) domain.Subscription {
	return domain.Subscription{
		ID:          domain.MustNewID(domain.SubscriptionIDPrefix, now),
		URL:         "https://hooks.example.com/bench",
		EventTypes:  []string{"*"},
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

func benchEvent(b *testing.B, store *postgres.Store, now time.Time) domain.Event {
	b.Helper()
	e := domain.Event{
		ID:        domain.MustNewID(domain.EventIDPrefix, now),
		Type:      "order.created",
		Source:    "bench",
		Data:      []byte(`{"order_id":"ord_1","total":12.5}`),
		Status:    domain.EventPending,
		CreatedAt: now,
	}
	if _, _, err := store.CreateEvent(b.Context(), e, now.Add(-time.Hour)); err != nil {
		b.Fatal(err)
	}
	return e
}

func benchDeliveries(e domain.Event, subs []domain.Subscription, now time.Time) []domain.Delivery {
	ds := make([]domain.Delivery, len(subs))
	for i, sub := range subs {
		ds[i] = domain.Delivery{
			ID:             domain.MustNewID(domain.DeliveryIDPrefix, now),
			EventID:        e.ID,
			SubscriptionID: sub.ID,
			Status:         domain.DeliveryPending,
			NextAttemptAt:  now,
			CreatedAt:      now,
			UpdatedAt:      now,
		}
	}
	return ds
}

// setUpBench returns a store with n subscriptions.
func setUpBench(b *testing.B, n int) (*postgres.Store, []domain.Subscription) {
	b.Helper()
	store := postgres.New(pgtest.NewPool(b))
	now := time.Now()
	subs := make([]domain.Subscription, n)
	for i := range subs {
		subs[i] = benchSubscription(now)
		if err := store.CreateSubscription(b.Context(), subs[i]); err != nil {
			b.Fatal(err)
		}
	}
	return store, subs
}

// BenchmarkCreateDeliveries measures one fan-out batch: one event to 50 or
// 500 subscriptions in one CreateDeliveries call.
func BenchmarkCreateDeliveries(b *testing.B) {
	for _, n := range []int{50, 500} {
		b.Run(fmt.Sprintf("deliveries=%d", n), func(b *testing.B) {
			store, subs := setUpBench(b, n)
			now := time.Now()
			for b.Loop() {
				b.StopTimer()
				e := benchEvent(b, store, now)
				fanouts := []ports.FanOut{{EventID: e.ID, Deliveries: benchDeliveries(e, subs, now)}}
				b.StartTimer()
				if _, err := store.CreateDeliveries(b.Context(), fanouts); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "deliveries/s")
		})
	}
}

// readyDeliveries creates n due deliveries outside the timer, changed by
// mods first.
func readyDeliveries(b *testing.B, store *postgres.Store, sub domain.Subscription, n int, now time.Time, mods ...func(*domain.Delivery)) []domain.Delivery {
	b.Helper()
	b.StopTimer()
	defer b.StartTimer()
	var fanouts []ports.FanOut
	var all []domain.Delivery
	for range n {
		e := benchEvent(b, store, now)
		ds := benchDeliveries(e, []domain.Subscription{sub}, now)
		for i := range ds {
			for _, mod := range mods {
				mod(&ds[i])
			}
		}
		fanouts = append(fanouts, ports.FanOut{EventID: e.ID, Deliveries: ds})
		all = append(all, ds...)
	}
	if _, err := store.CreateDeliveries(b.Context(), fanouts); err != nil {
		b.Fatal(err)
	}
	return all
}

// BenchmarkRecordAttempt measures recording an outcome: a retry (one
// statement, no transaction) and a final success (which also rolls the
// event's status up in a transaction).
func BenchmarkRecordAttempt(b *testing.B) {
	b.Run("retrying", func(b *testing.B) {
		store, subs := setUpBench(b, 1)
		now := time.Now()
		d := readyDeliveries(b, store, subs[0], 1, now)[0]
		for b.Loop() {
			d.Attempts++
			d.Status = domain.DeliveryRetrying
			d.NextAttemptAt = now.Add(time.Minute)
			d.LastStatusCode = 503
			a := domain.Attempt{DeliveryID: d.ID, Number: d.Attempts, StatusCode: 503, ResponseBody: "busy", Duration: time.Millisecond, CreatedAt: now}
			if _, err := store.RecordAttempt(b.Context(), d, a); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("delivered", func(b *testing.B) {
		store, subs := setUpBench(b, 1)
		now := time.Now()
		var ready []domain.Delivery
		for b.Loop() {
			if len(ready) == 0 {
				ready = readyDeliveries(b, store, subs[0], 200, now)
			}
			d := ready[0]
			ready = ready[1:]
			d.Attempts, d.Status, d.LastStatusCode = 1, domain.DeliveryDelivered, 200
			a := domain.Attempt{DeliveryID: d.ID, Number: 1, StatusCode: 200, ResponseBody: "ok", Duration: time.Millisecond, CreatedAt: now}
			if _, err := store.RecordAttempt(b.Context(), d, a); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkClaimDelivery measures the worker's claim: one statement that
// leases the delivery and returns it with its event and subscription.
func BenchmarkClaimDelivery(b *testing.B) {
	store, subs := setUpBench(b, 1)
	now := time.Now()
	var ready []domain.Delivery
	for b.Loop() {
		if len(ready) == 0 {
			ready = readyDeliveries(b, store, subs[0], 200, now)
		}
		d := ready[0]
		ready = ready[1:]
		if _, err := store.ClaimDelivery(b.Context(), d.ID, now, time.Minute); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkClaimOrderedDelivery is BenchmarkClaimDelivery for ordered
// deliveries, each first in line (a key of its own): the price of the two
// ordering checks (an index probe for an earlier delivery of the key, a
// scan of the events awaiting fan-out) that unordered claims skip.
func BenchmarkClaimOrderedDelivery(b *testing.B) {
	store, subs := setUpBench(b, 1)
	now := time.Now()
	var ready []domain.Delivery
	for b.Loop() {
		if len(ready) == 0 {
			ready = readyDeliveries(b, store, subs[0], 200, now, func(d *domain.Delivery) { d.OrderingKey = d.EventID })
		}
		d := ready[0]
		ready = ready[1:]
		if _, err := store.ClaimDelivery(b.Context(), d.ID, now, time.Minute); err != nil {
			b.Fatal(err)
		}
	}
}
