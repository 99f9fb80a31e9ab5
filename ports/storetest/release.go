package storetest

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

func testRelease(t *testing.T, newStore func(t *testing.T) ports.Store) {
	t.Run("ReleaseStoresTheNewStateWithoutAnAttempt", func(t *testing.T) {
		t.Parallel()
		cases := []struct {
			name string
			// failedBefore makes one failed attempt before the claim.
			failedBefore bool
			status       domain.DeliveryStatus
			reason       string
			lastError    string
			delay        time.Duration
			// sibling, when set, is the state of the event's other delivery.
			sibling   domain.DeliveryStatus
			wantEvent domain.EventStatus
		}{
			{
				name:   "throttled: back to pending",
				status: domain.DeliveryPending, reason: domain.ReasonThrottled, delay: 200 * time.Millisecond,
				wantEvent: domain.EventPending,
			},
			{
				name:         "circuit open: back to retrying",
				failedBefore: true,
				status:       domain.DeliveryRetrying, reason: domain.ReasonCircuitOpen, delay: 30 * time.Second,
				wantEvent: domain.EventPending,
			},
			{
				name:   "subscription disabled: dead, the only delivery fails its event",
				status: domain.DeliveryDead, lastError: "subscription disabled: gone",
				wantEvent: domain.EventFailed,
			},
			{
				name:   "dead while another delivery is in flight: the event waits",
				status: domain.DeliveryDead, lastError: "subscription disabled: gone",
				sibling: domain.DeliveryPending, wantEvent: domain.EventPending,
			},
			{
				name:   "dead after the other delivery succeeded: the event fails",
				status: domain.DeliveryDead, lastError: "subscription disabled: gone",
				sibling: domain.DeliveryDelivered, wantEvent: domain.EventFailed,
			},
			{
				name:    "settled as delivered with the other delivered: the event is delivered",
				status:  domain.DeliveryDelivered,
				sibling: domain.DeliveryDelivered, wantEvent: domain.EventDelivered,
			},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				f := newFixture(t, newStore)
				subs := []domain.Subscription{f.subscription()}
				if tc.sibling != "" {
					subs = append(subs, f.subscription())
				}
				e := f.event()
				ds := f.fanOut(e, base, subs...)
				d := ds[0]
				var wantAttempts []domain.Attempt
				if tc.failedBefore {
					var a domain.Attempt
					d, a = f.record(f.claim(d, base), base, outcome{status: domain.DeliveryRetrying, statusCode: 503, next: base.Add(time.Second), err: "503"})
					wantAttempts = append(wantAttempts, a)
				}
				if tc.sibling == domain.DeliveryDelivered {
					f.record(f.claim(ds[1], base), base, outcome{status: domain.DeliveryDelivered, statusCode: 200})
				}

				now := base.Add(2 * time.Second)
				claimed := f.claim(d, now)
				released := claimed
				released.Status = tc.status
				released.NextAttemptAt = now.Add(tc.delay)
				released.Reason = tc.reason
				released.LastError = tc.lastError
				released.UpdatedAt = now.Add(time.Nanosecond)
				// Only the fields ReleaseDelivery writes may change: what
				// else the caller passes is ignored.
				passed := released
				passed.Attempts += 7
				passed.LastStatusCode = 418
				passed.OrderingKey = "ignored"
				next, err := f.store.ReleaseDelivery(f.ctx, passed)
				require.NoError(t, err)
				assert.Empty(t, next, "an unordered delivery lets nothing go")

				want := claimed
				want.Status = released.Status
				want.NextAttemptAt = us(released.NextAttemptAt)
				want.Reason = released.Reason
				want.LastError = released.LastError
				want.UpdatedAt = us(released.UpdatedAt)
				got, err := f.store.GetDelivery(f.ctx, d.ID)
				require.NoError(t, err)
				assert.Equal(t, want, got, "Status, NextAttemptAt, Reason, LastError and UpdatedAt are written, nothing else")

				attempts, err := f.store.DeliveryAttempts(f.ctx, d.ID)
				require.NoError(t, err)
				if wantAttempts == nil {
					assert.Empty(t, attempts, "a release is not an attempt")
				} else {
					assert.Equal(t, wantAttempts, attempts, "a release is not an attempt")
				}
				assertEventStatus(t, f, e.ID, tc.wantEvent, "the event rolls up like after RecordAttempt")

				_, err = f.store.ClaimDelivery(f.ctx, d.ID, now.Add(tc.delay).Add(-time.Microsecond), leaseMargin(now.Add(tc.delay).Add(-time.Microsecond), now.Add(time.Minute)))
				assert.ErrorIs(t, err, domain.ErrConflict, "a released delivery is not due before its NextAttemptAt")
			})
		}
	})

	t.Run("ReleaseClearsTheEnqueuedMark", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		d := f.fanOut(f.event(), base, f.subscription())[0]
		// Throttled right after creation, well inside requeueAfter of the
		// creation-time enqueue: only a cleared mark lets the scan see it.
		claimed := f.claim(d, base)
		claimed.Status = domain.DeliveryPending
		claimed.Reason = domain.ReasonThrottled
		claimed.NextAttemptAt = base.Add(time.Second)
		claimed.UpdatedAt = base
		_, err := f.store.ReleaseDelivery(f.ctx, claimed)
		require.NoError(t, err)

		due, err := f.due(base.Add(time.Second-time.Microsecond), requeueAfter, 10)
		require.NoError(t, err)
		assert.Empty(t, due, "not due yet")
		due, err = f.due(base.Add(time.Second), requeueAfter, 10)
		require.NoError(t, err)
		assert.Equal(t, []string{d.ID}, due, "due as soon as the postponement ends")
	})

	t.Run("ReleaseOfMissingDeliveryIsNotFound", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		d := newDelivery(f.event(), f.subscription(), base)
		d.Status = domain.DeliveryDead
		_, err := f.store.ReleaseDelivery(f.ctx, d)
		assert.ErrorIs(t, err, domain.ErrNotFound)
		_, err = f.store.GetDelivery(f.ctx, d.ID)
		assert.ErrorIs(t, err, domain.ErrNotFound, "nothing was stored")
	})

	t.Run("ConcurrentReleasesAndAttemptsRollUpTheEvent", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, newStore)
		for _, final := range []domain.DeliveryStatus{domain.DeliveryDelivered, domain.DeliveryDead} {
			var subs []domain.Subscription
			for range 8 {
				subs = append(subs, f.subscription())
			}
			e := f.event()
			ds := f.fanOut(e, base, subs...)
			var wg sync.WaitGroup
			errs := make(chan error, len(ds))
			for i, d := range ds {
				claimed := f.claim(d, base)
				wg.Go(func() {
					// Half settle by an attempt, half without one.
					if i%2 == 0 {
						d, a := attemptOf(claimed, base, outcome{status: domain.DeliveryDelivered, statusCode: 200})
						_, err := f.store.RecordAttempt(f.ctx, d, a)
						errs <- err
						return
					}
					claimed.Status = domain.DeliveryDelivered
					if i == len(ds)-1 {
						claimed.Status = final
					}
					claimed.UpdatedAt = base
					_, err := f.store.ReleaseDelivery(f.ctx, claimed)
					errs <- err
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			want := domain.EventDelivered
			if final == domain.DeliveryDead {
				want = domain.EventFailed
			}
			assertEventStatus(t, f, e.ID, want, "deliveries that settle together still settle their event")
		}
	})
}
