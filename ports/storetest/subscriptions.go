package storetest

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

func testSubscriptions(t *testing.T, newStore func(t *testing.T) ports.Store) {
	t.Run("CreateThenGetRoundTripsEveryField", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		sub := newSubscription(base)
		sub.Description = "orders → ERP ✓"
		sub.EventTypes = []string{"order.*", "invoice.paid", "*"}
		sub.PreviousSecret = domain.MustGenerateSecret()
		sub.PreviousSecretExpiresAt = base.Add(24*time.Hour + time.Nanosecond)
		sub.Active = false
		sub.DisabledReason = domain.DisabledGone
		sub.RateLimit = 7
		sub.MaxInFlight = 3
		sub.Timeout = 1500*time.Millisecond + 999*time.Nanosecond
		sub.RetryPolicy = domain.RetryPolicy{
			Strategy:    domain.StrategySchedule,
			Schedule:    []time.Duration{time.Minute, 5 * time.Minute, 90 * time.Second},
			MaxAttempts: 4,
		}
		sub.OrderingKey = "/data/customer_id"
		sub.Headers = map[string]string{"X-Tenant": "acme", "Authorization": "Bearer t0k"}
		sub.UpdatedAt = base.Add(time.Second)
		require.NoError(t, f.store.CreateSubscription(f.ctx, sub))

		got, err := f.store.GetSubscription(f.ctx, sub.ID)
		require.NoError(t, err)
		assert.Equal(t, wantSubscription(sub), got)
		assert.Equal(t, time.UTC, got.CreatedAt.Location(), "times come back in UTC")
		assert.Equal(t, sub.Secret.Reveal(), got.Secret.Reveal())
		assert.Equal(t, sub.PreviousSecret.Reveal(), got.PreviousSecret.Reveal())
	})

	t.Run("ExponentialRetryPolicyRoundTrips", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		sub := f.subscription(func(s *domain.Subscription) {
			s.RetryPolicy = domain.RetryPolicy{
				Strategy:        domain.StrategyExponential,
				InitialInterval: 250 * time.Millisecond,
				Multiplier:      1.7,
				MaxInterval:     3 * time.Hour,
				Jitter:          0.25,
				MaxAttempts:     9,
			}
		})
		got, err := f.store.GetSubscription(f.ctx, sub.ID)
		require.NoError(t, err)
		assert.Equal(t, sub.RetryPolicy, got.RetryPolicy)
		assert.True(t, got.PreviousSecret.IsZero(), "no previous secret was set")
		assert.True(t, got.PreviousSecretExpiresAt.IsZero())
	})

	t.Run("CreateWithExistingIDIsConflict", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		sub := f.subscription()
		dup := newSubscription(base)
		dup.ID = sub.ID
		err := f.store.CreateSubscription(f.ctx, dup)
		require.ErrorIs(t, err, domain.ErrConflict)
		got, err := f.store.GetSubscription(f.ctx, sub.ID)
		require.NoError(t, err)
		assert.Equal(t, sub, got, "the first subscription is unchanged")
	})

	t.Run("MissingIsNotFound", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		missing := domain.MustNewID(domain.SubscriptionIDPrefix, base)
		_, err := f.store.GetSubscription(f.ctx, missing)
		assert.ErrorIs(t, err, domain.ErrNotFound, "GetSubscription")
		called := false
		_, err = f.store.UpdateSubscription(f.ctx, missing, func(*domain.Subscription) error { called = true; return nil })
		assert.ErrorIs(t, err, domain.ErrNotFound, "UpdateSubscription")
		assert.False(t, called, "update must not run for a missing subscription")
		assert.ErrorIs(t, f.deleteSubscription(missing), domain.ErrNotFound, "DeleteSubscription")
	})

	t.Run("ListPagesInIDOrder", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		var want []string
		for i := range 7 {
			sub := f.subscription(func(s *domain.Subscription) {
				s.ID = domain.MustNewID(domain.SubscriptionIDPrefix, base.Add(time.Duration(i)*time.Minute))
				s.Active = i%2 == 0 // inactive ones are listed too
			})
			want = append(want, sub.ID)
		}
		slices.Sort(want)

		var got []string
		after := ""
		for page := 0; ; page++ {
			require.Less(t, page, 5, "pagination does not end")
			subs, err := f.store.ListSubscriptions(f.ctx, ports.Page{After: after, Limit: 3})
			require.NoError(t, err)
			require.LessOrEqual(t, len(subs), 3, "a page holds at most Limit subscriptions")
			if len(subs) == 0 {
				break
			}
			for _, s := range subs {
				got = append(got, s.ID)
			}
			after = subs[len(subs)-1].ID
		}
		assert.Equal(t, want, got)

		first, err := f.store.ListSubscriptions(f.ctx, ports.Page{Limit: 100})
		require.NoError(t, err)
		require.Len(t, first, 7)
		full, err := f.store.GetSubscription(f.ctx, first[0].ID)
		require.NoError(t, err)
		assert.Equal(t, full, first[0], "listed subscriptions are complete")

		last, err := f.store.ListSubscriptions(f.ctx, ports.Page{After: want[5], Limit: 3})
		require.NoError(t, err)
		assert.Len(t, last, 1, "the last page is short")

		// A cursor stays valid when its subscription is deleted meanwhile.
		require.NoError(t, f.deleteSubscription(want[2]))
		page, err := f.store.ListSubscriptions(f.ctx, ports.Page{After: want[2], Limit: 2})
		require.NoError(t, err)
		assert.Equal(t, want[3:5], []string{page[0].ID, page[1].ID})
	})

	t.Run("ActiveSubscriptionsListsOnlyActiveOnes", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		subs, err := f.store.ActiveSubscriptions(f.ctx)
		require.NoError(t, err)
		assert.Empty(t, subs)

		var want []domain.Subscription
		for i := range 5 {
			sub := f.subscription(func(s *domain.Subscription) { s.Active = i != 1 && i != 3 })
			if sub.Active {
				want = append(want, sub)
			}
		}
		subs, err = f.store.ActiveSubscriptions(f.ctx)
		require.NoError(t, err)
		assert.ElementsMatch(t, want, subs)
	})

	t.Run("SubscriptionChangesTellWhatChangedSinceACursor", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		changes := func(since int64) (map[string]domain.Subscription, ports.SubscriptionChanges) {
			t.Helper()
			changed := map[string]domain.Subscription{}
			got, err := f.store.SubscriptionChanges(f.ctx, since, func(page []domain.Subscription) {
				assert.NotEmpty(t, page, "changed is called with a page of changes")
				for _, s := range page {
					changed[s.ID] = s
				}
			})
			require.NoError(t, err)
			return changed, got
		}
		changed, start := changes(0)
		assert.Empty(t, changed)
		assert.Empty(t, start.Deleted)

		a := f.subscription()
		b := f.subscription()
		c := f.subscription(func(s *domain.Subscription) { s.Active = false })
		changed, first := changes(0)
		assert.Equal(t, map[string]domain.Subscription{a.ID: a, b.ID: b}, changed, "everything active, as it is")
		assert.Empty(t, first.Deleted, "a first load tells no deletions")
		assert.Greater(t, first.Cursor, start.Cursor, "each change moves the cursor")

		changed, same := changes(first.Cursor)
		assert.Empty(t, changed, "nothing changed since")
		assert.Empty(t, same.Deleted)
		assert.Equal(t, first.Cursor, same.Cursor)

		a, err := f.store.UpdateSubscription(f.ctx, a.ID, func(s *domain.Subscription) error {
			s.EventTypes = []string{"invoice.*"}
			return nil
		})
		require.NoError(t, err)
		require.NoError(t, f.deleteSubscription(b.ID))
		c, err = f.store.UpdateSubscription(f.ctx, c.ID, func(s *domain.Subscription) error { s.Active = true; return nil })
		require.NoError(t, err)
		d := f.subscription(func(s *domain.Subscription) { s.Active = false })
		changed, second := changes(first.Cursor)
		assert.Equal(t, map[string]domain.Subscription{a.ID: a, c.ID: c, d.ID: d}, changed, "updated and created ones, active or not")
		assert.Equal(t, []string{b.ID}, second.Deleted)
		assert.Greater(t, second.Cursor, first.Cursor)

		// A copy kept by the changes agrees with one loaded whole.
		kept := domain.NewSubscriptionIndex(a, b)
		for _, s := range changed {
			kept.Put(s)
		}
		for _, id := range second.Deleted {
			kept.Remove(id)
		}
		active, err := f.store.ActiveSubscriptions(f.ctx)
		require.NoError(t, err)
		whole := domain.NewSubscriptionIndex(active...)
		for _, eventType := range []string{"order.created", "invoice.paid"} {
			assert.Equal(t, whole.Match(eventType), kept.Match(eventType), eventType)
		}
		assert.Equal(t, whole.Len(), kept.Len())
	})

	t.Run("SubscriptionChangesComeInPages", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		start, err := f.store.SubscriptionChanges(f.ctx, 0, func([]domain.Subscription) {})
		require.NoError(t, err)
		const n = 1100
		for range n {
			f.subscription()
		}
		for _, since := range []int64{0, start.Cursor} {
			seen := map[string]bool{}
			_, err := f.store.SubscriptionChanges(f.ctx, since, func(page []domain.Subscription) {
				assert.LessOrEqual(t, len(page), 1000, "a page holds at most a few hundred")
				for _, s := range page {
					seen[s.ID] = true
				}
			})
			require.NoError(t, err)
			assert.Len(t, seen, n, "since %d: every change, each at least once", since)
		}
	})

	t.Run("UpdateStoresTheResult", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		sub := f.subscription()
		later := base.Add(time.Hour + time.Nanosecond)
		updated, err := f.store.UpdateSubscription(f.ctx, sub.ID, func(s *domain.Subscription) error {
			assert.Equal(t, sub, *s, "update sees the stored subscription")
			s.URL = "https://other.example.com/in"
			s.EventTypes = []string{"invoice.*"}
			s.PreviousSecret, s.Secret = s.Secret, domain.MustGenerateSecret()
			s.PreviousSecretExpiresAt = later.Add(24 * time.Hour)
			s.Active = false
			s.DisabledReason = domain.DisabledGone
			s.Headers = map[string]string{"X-New": "1"}
			s.UpdatedAt = later
			return nil
		})
		require.NoError(t, err)
		got, err := f.store.GetSubscription(f.ctx, sub.ID)
		require.NoError(t, err)
		assert.Equal(t, got, updated, "UpdateSubscription returns what was stored")
		assert.Equal(t, "https://other.example.com/in", got.URL)
		assert.Equal(t, []string{"invoice.*"}, got.EventTypes)
		assert.Equal(t, sub.Secret.Reveal(), got.PreviousSecret.Reveal())
		assert.Equal(t, us(later.Add(24*time.Hour)), got.PreviousSecretExpiresAt)
		assert.False(t, got.Active)
		assert.Equal(t, domain.DisabledGone, got.DisabledReason)
		assert.Equal(t, map[string]string{"X-New": "1"}, got.Headers)
		assert.Equal(t, us(later), got.UpdatedAt)
		assert.Equal(t, sub.CreatedAt, got.CreatedAt)
	})

	t.Run("UpdateErrorStoresNothing", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		sub := f.subscription()
		refused := errors.New("rate_limit must be 1..10000, got -5")
		_, err := f.store.UpdateSubscription(f.ctx, sub.ID, func(s *domain.Subscription) error {
			s.URL = "https://changed.example.com"
			s.RateLimit = -5
			s.Headers["X-Leak"] = "1"
			return refused
		})
		require.ErrorIs(t, err, refused, "the update's error is returned")
		got, err := f.store.GetSubscription(f.ctx, sub.ID)
		require.NoError(t, err)
		assert.Equal(t, sub, got, "nothing was stored")
	})

	t.Run("ConcurrentUpdatesAllLand", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		sub := f.subscription(func(s *domain.Subscription) { s.RateLimit = 1 })
		const writers = 20
		var wg sync.WaitGroup
		errs := make(chan error, writers)
		for range writers {
			wg.Go(func() {
				_, err := f.store.UpdateSubscription(f.ctx, sub.ID, func(s *domain.Subscription) error {
					s.RateLimit++
					return nil
				})
				errs <- err
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		got, err := f.store.GetSubscription(f.ctx, sub.ID)
		require.NoError(t, err)
		assert.Equal(t, 1+writers, got.RateLimit, "every increment lands: no lost update")
	})

	t.Run("DeleteRemovesDeliveriesAndAttempts", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		gone, kept := f.subscription(), f.subscription()
		e := f.event()
		ds := f.fanOut(e, base, gone, kept)
		f.record(f.claim(ds[0], base), base, outcome{status: domain.DeliveryRetrying, statusCode: 500, next: base.Add(time.Minute)})
		_, keptAttempt := f.record(f.claim(ds[1], base), base, outcome{status: domain.DeliveryRetrying, statusCode: 502, next: base.Add(time.Minute)})

		require.NoError(t, f.deleteSubscription(gone.ID))

		_, err := f.store.GetSubscription(f.ctx, gone.ID)
		assert.ErrorIs(t, err, domain.ErrNotFound)
		_, err = f.store.GetDelivery(f.ctx, ds[0].ID)
		assert.ErrorIs(t, err, domain.ErrNotFound, "the subscription's delivery is gone")
		deliveries, err := f.store.EventDeliveries(f.ctx, e.ID, everyDelivery)
		require.NoError(t, err)
		assert.Equal(t, []string{ds[1].ID}, ids(deliveries), "another subscription's delivery of the event stays")
		attempts, err := f.store.EventAttempts(f.ctx, e.ID, everyAttempt)
		require.NoError(t, err)
		assert.Equal(t, []domain.Attempt{keptAttempt}, attempts, "only the kept delivery's attempt remains")
		_, err = f.store.GetEvent(f.ctx, e.ID)
		assert.NoError(t, err, "the event stays")
		assert.ErrorIs(t, f.deleteSubscription(gone.ID), domain.ErrNotFound, "a second delete")
	})
	t.Run("DeleteRollsUpTheEventsThatLostADelivery", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		gone, kept := f.subscription(), f.subscription()
		// Each case is an event with a delivery to gone in state removed
		// and, when other is set, one to kept in that state.
		cases := []struct {
			name    string
			removed domain.DeliveryStatus
			other   domain.DeliveryStatus
			want    domain.EventStatus
		}{
			{name: "the rest delivered", removed: domain.DeliveryPending, other: domain.DeliveryDelivered, want: domain.EventDelivered},
			{name: "the rest dead", removed: domain.DeliveryRetrying, other: domain.DeliveryDead, want: domain.EventFailed},
			{name: "the removed one was the dead one", removed: domain.DeliveryDead, other: domain.DeliveryDelivered, want: domain.EventDelivered},
			{name: "the rest still in flight", removed: domain.DeliveryDelivering, other: domain.DeliveryRetrying, want: domain.EventPending},
			{name: "the rest still pending", removed: domain.DeliveryDead, other: domain.DeliveryPending, want: domain.EventPending},
			{name: "no delivery left", removed: domain.DeliveryRetrying, want: domain.EventDelivered},
			{name: "no delivery left, the removed one dead", removed: domain.DeliveryDead, want: domain.EventDelivered},
		}
		settle := func(d domain.Delivery, status domain.DeliveryStatus) {
			switch status {
			case domain.DeliveryPending:
			case domain.DeliveryDelivering:
				f.claim(d, base)
			default:
				f.record(f.claim(d, base), base, outcome{status: status, statusCode: 500, next: base.Add(time.Minute)})
			}
		}
		events := make([]domain.Event, len(cases))
		for i, tc := range cases {
			events[i] = f.event()
			subs := []domain.Subscription{gone}
			if tc.other != "" {
				subs = append(subs, kept)
			}
			ds := f.fanOut(events[i], base, subs...)
			if tc.other != "" {
				settle(ds[1], tc.other)
			}
			settle(ds[0], tc.removed)
		}
		// An event gone has no delivery of stays as it was.
		untouched := f.event()
		d := f.fanOut(untouched, base, kept)[0]
		f.record(f.claim(d, base), base, outcome{status: domain.DeliveryDead, statusCode: 400})

		require.NoError(t, f.deleteSubscription(gone.ID))
		for i, tc := range cases {
			assertEventStatus(t, f, events[i].ID, tc.want, tc.name)
		}
		assertEventStatus(t, f, untouched.ID, domain.EventFailed, "an event that lost nothing")
	})
}
