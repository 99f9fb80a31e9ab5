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

// testListing covers the read side of the API: deliveries by filter, and a
// delivery's attempts.
func testListing(t *testing.T, newStore func(t *testing.T) ports.Store) {
	t.Run("ListDeliveriesFiltersAndPagesInIDOrder", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		subA, subB, idle := f.subscription(), f.subscription(), f.subscription()
		// Three events to both subscriptions, each delivery in another state,
		// created out of id order.
		var all []domain.Delivery
		states := []domain.DeliveryStatus{
			domain.DeliveryDead, domain.DeliveryPending, domain.DeliveryDelivered,
			domain.DeliveryRetrying, domain.DeliveryDelivering, domain.DeliveryDead,
		}
		var events []domain.Event
		for i := range 3 {
			e := f.event()
			events = append(events, e)
			for j, d := range f.fanOut(e, base.Add(time.Duration(3-i)*time.Second), subA, subB) {
				switch status := states[2*i+j]; status {
				case domain.DeliveryPending:
				case domain.DeliveryDelivering:
					d = f.claim(d, base.Add(time.Minute))
				default:
					d, _ = f.record(f.claim(d, base.Add(time.Minute)), base.Add(time.Minute), outcome{status: status, statusCode: 500, next: base.Add(time.Hour)})
				}
				all = append(all, d)
			}
		}
		slices.SortFunc(all, func(a, b domain.Delivery) int { return cmp.Compare(a.ID, b.ID) })
		matching := func(f ports.DeliveryFilter) []domain.Delivery {
			out := []domain.Delivery{}
			for _, d := range all {
				if (f.SubscriptionID == "" || d.SubscriptionID == f.SubscriptionID) &&
					(f.EventID == "" || d.EventID == f.EventID) &&
					(f.Status == "" || d.Status == f.Status) {
					out = append(out, d)
				}
			}
			return out
		}

		cases := []struct {
			name   string
			filter ports.DeliveryFilter
			want   int // how many match, to show the table means something
		}{
			{"no filter matches everything", ports.DeliveryFilter{}, 6},
			{"by subscription", ports.DeliveryFilter{SubscriptionID: subA.ID}, 3},
			{"by event", ports.DeliveryFilter{EventID: events[1].ID}, 2},
			{"by status dead", ports.DeliveryFilter{Status: domain.DeliveryDead}, 2},
			{"by status retrying", ports.DeliveryFilter{Status: domain.DeliveryRetrying}, 1},
			{"by subscription and status", ports.DeliveryFilter{SubscriptionID: subB.ID, Status: domain.DeliveryDead}, 1},
			{"by subscription and event", ports.DeliveryFilter{SubscriptionID: subB.ID, EventID: events[0].ID}, 1},
			{"by all three", ports.DeliveryFilter{SubscriptionID: subA.ID, EventID: events[2].ID, Status: domain.DeliveryDelivering}, 1},
			{"all three, not matching together", ports.DeliveryFilter{SubscriptionID: subA.ID, EventID: events[2].ID, Status: domain.DeliveryDead}, 0},
			{"a subscription without deliveries", ports.DeliveryFilter{SubscriptionID: idle.ID}, 0},
			{"an event that does not exist", ports.DeliveryFilter{EventID: domain.MustNewID(domain.EventIDPrefix, base)}, 0},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				want := matching(tc.filter)
				require.Len(t, want, tc.want, "the fixture")

				whole, err := f.store.ListDeliveries(f.ctx, tc.filter, ports.Page{Limit: 100})
				require.NoError(t, err)
				if len(want) == 0 {
					assert.Empty(t, whole)
				} else {
					assert.Equal(t, want, whole, "complete deliveries, in id order")
				}

				var paged []domain.Delivery
				after := ""
				for page := 0; ; page++ {
					require.Less(t, page, 10, "pagination does not end")
					got, err := f.store.ListDeliveries(f.ctx, tc.filter, ports.Page{After: after, Limit: 2})
					require.NoError(t, err)
					require.LessOrEqual(t, len(got), 2, "a page holds at most Limit deliveries")
					if len(got) == 0 {
						break
					}
					paged = append(paged, got...)
					after = got[len(got)-1].ID
				}
				assert.Equal(t, ids(want), ids(paged), "pages of Limit, each after the last id of the one before")
			})
		}

		t.Run("after a cursor that is not a listed id", func(t *testing.T) {
			t.Parallel()
			// The cursor is exclusive and need not exist: a delivery deleted
			// since the last page keeps its place.
			cursor := all[2].ID + "0" // sorts between all[2] and all[3]
			got, err := f.store.ListDeliveries(f.ctx, ports.DeliveryFilter{}, ports.Page{After: cursor, Limit: 2})
			require.NoError(t, err)
			assert.Equal(t, ids(all[3:5]), ids(got))
			got, err = f.store.ListDeliveries(f.ctx, ports.DeliveryFilter{}, ports.Page{After: all[5].ID, Limit: 2})
			require.NoError(t, err)
			assert.Empty(t, got, "after the last id")
		})
	})

	t.Run("DeliveryAttemptsInAttemptOrder", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		e := f.event()
		ds := f.fanOut(e, base, f.subscription(), f.subscription())
		tried, untried := ds[0], ds[1]
		var want []domain.Attempt
		now := base
		for _, status := range []domain.DeliveryStatus{domain.DeliveryRetrying, domain.DeliveryRetrying, domain.DeliveryDead} {
			var a domain.Attempt
			tried, a = f.record(f.claim(tried, now), now, outcome{status: status, statusCode: 502, next: now.Add(time.Second)})
			want = append(want, a)
			now = now.Add(time.Second)
		}

		cases := []struct {
			name    string
			id      string
			want    []domain.Attempt
			wantErr error
		}{
			{name: "a delivery with attempts", id: tried.ID, want: want},
			{name: "a delivery without attempts", id: untried.ID},
			{name: "a delivery that does not exist", id: domain.MustNewID(domain.DeliveryIDPrefix, base), wantErr: domain.ErrNotFound},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				got, err := f.store.DeliveryAttempts(f.ctx, tc.id)
				if tc.wantErr != nil {
					assert.ErrorIs(t, err, tc.wantErr)
					return
				}
				require.NoError(t, err)
				if tc.want == nil {
					assert.Empty(t, got)
				} else {
					assert.Equal(t, tc.want, got)
				}
			})
		}
	})
}
