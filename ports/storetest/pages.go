package storetest

import (
	"cmp"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// testEventPages covers reading an event's deliveries and attempts one
// bounded page at a time: an event fanned out to many subscriptions must
// not be read whole.
func testEventPages(t *testing.T, newStore func(t *testing.T) ports.Store) {
	t.Run("DeliveriesPageThroughEveryDeliveryOnceInSubscriptionOrder", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		subs := make([]domain.Subscription, 7)
		for i := range subs {
			subs[i] = f.subscription()
		}
		// Fanned out in reverse, so delivery ids and subscription ids sort
		// in opposite orders: the pages follow subscription ids.
		slices.Reverse(subs)
		e := f.event()
		want := f.fanOut(e, base, subs...)
		slices.SortFunc(want, func(a, b domain.Delivery) int { return cmp.Compare(a.SubscriptionID, b.SubscriptionID) })
		other := f.event()
		f.fanOut(other, base, subs[0])

		for _, limit := range []int{1, 3, 7, 8} {
			var got []domain.Delivery
			p := ports.Page{Limit: limit}
			for pages := 0; ; pages++ {
				require.Less(t, pages, len(want)+2, "limit %d: paging must end", limit)
				page, err := f.store.EventDeliveries(f.ctx, e.ID, p)
				require.NoError(t, err)
				require.LessOrEqual(t, len(page), limit, "limit %d: a page holds at most the limit", limit)
				if len(page) == 0 {
					break
				}
				got = append(got, page...)
				p.After = page[len(page)-1].SubscriptionID
			}
			assert.Equal(t, want, got, "limit %d: every delivery of the event once, in subscription id order", limit)
		}
	})

	t.Run("AttemptsPageThroughEveryAttemptOnceInOrder", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		subs := make([]domain.Subscription, 4)
		for i := range subs {
			subs[i] = f.subscription()
		}
		slices.Reverse(subs)
		e := f.event()
		ds := f.fanOut(e, base, subs...)
		var want []domain.Attempt
		for i, d := range ds {
			// Delivery i makes i attempts (the first none), each a retry
			// but the last.
			now := base
			for n := range i {
				status := domain.DeliveryRetrying
				if n == i-1 {
					status = domain.DeliveryDead
				}
				var a domain.Attempt
				d, a = f.record(f.claim(d, now), now, outcome{status: status, statusCode: 500, next: now.Add(time.Second)})
				want = append(want, a)
				now = now.Add(time.Second)
			}
		}
		slices.SortFunc(want, func(a, b domain.Attempt) int {
			return cmp.Or(cmp.Compare(a.SubscriptionID, b.SubscriptionID), cmp.Compare(a.Number, b.Number))
		})
		require.Len(t, want, 6)

		for _, limit := range []int{1, 2, 4, 6, 7} {
			var got []domain.Attempt
			p := ports.AttemptPage{Limit: limit}
			for pages := 0; ; pages++ {
				require.Less(t, pages, len(want)+2, "limit %d: paging must end", limit)
				page, err := f.store.EventAttempts(f.ctx, e.ID, p)
				require.NoError(t, err)
				require.LessOrEqual(t, len(page), limit, "limit %d: a page holds at most the limit", limit)
				if len(page) == 0 {
					break
				}
				got = append(got, page...)
				last := page[len(page)-1]
				p.AfterSubscription, p.AfterAttempt = last.SubscriptionID, last.Number
			}
			assert.Equal(t, want, got, "limit %d: every attempt once, by subscription then attempt number", limit)
		}
	})

	t.Run("AnEventsStatusCoversDeliveriesBeyondThePage", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		subs := []domain.Subscription{f.subscription(), f.subscription(), f.subscription()}
		e := f.event()
		ds := f.fanOut(e, base, subs...)
		f.record(f.claim(ds[0], base), base, outcome{status: domain.DeliveryDelivered, statusCode: 200})
		f.record(f.claim(ds[1], base), base, outcome{status: domain.DeliveryDelivered, statusCode: 200})
		f.record(f.claim(ds[2], base), base, outcome{status: domain.DeliveryDead, statusCode: 400})

		first, err := f.store.EventDeliveries(f.ctx, e.ID, ports.Page{Limit: 1})
		require.NoError(t, err)
		require.Len(t, first, 1)
		assertEventStatus(t, f, e.ID, domain.EventFailed, "the dead delivery is not on the first page but fails the event")
	})
}
