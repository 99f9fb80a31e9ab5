package redis

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatch-webhooks/dispatch/adapters/redis/redistest"
	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// leased is a LeasedProtection on client and prefix whose windows pass by
// clock (a clock of its own when nil), closed when the test ends.
func leased(t testing.TB, client goredis.UniversalClient, prefix string, clock *fakeClock) *LeasedProtection {
	t.Helper()
	opts := LeaseOptions{Window: time.Hour} // the clock moves windows on
	if clock != nil {
		opts.Now = clock.Now
	} else {
		opts.Window = 0
	}
	l := NewLeasedProtection(NewProtection(client, prefix, ProtectionOptions{}), opts)
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	return l
}

// realLeaseClient is a client on the real Redis and a fresh prefix whose
// keys go when the test ends.
func realLeaseClient(t testing.TB) (goredis.UniversalClient, string) {
	t.Helper()
	client, prefix := redistest.Client(t), redistest.Prefix(t)
	t.Cleanup(func() { _ = redistest.DeleteKeys(context.Background(), client, "rate:"+prefix) })
	return client, prefix
}

func leaseAdmission(sub, holder string, perSecond, slots int) ports.Admission {
	return ports.Admission{
		SubscriptionID: sub, Holder: holder, Breaker: domain.DefaultBreakerConfig(), Now: time.Now(),
		PerSecond: perSecond, MaxInFlight: slots, Lease: time.Minute,
	}
}

func admitLeased(t *testing.T, l *LeasedProtection, req ports.Admission) ports.Admitted {
	t.Helper()
	res, err := l.Admit(t.Context(), req)
	require.NoError(t, err, "admit %s", req.Holder)
	return res
}

func finishLeased(t *testing.T, l *LeasedProtection, sub, holder string, success bool) domain.Breaker {
	t.Helper()
	state, err := l.Finish(t.Context(), sub, holder, domain.DefaultBreakerConfig(), success, time.Now())
	require.NoError(t, err, "finish %s", holder)
	return state
}

// members is the subscription's lease set on Redis.
func members(t *testing.T, client goredis.UniversalClient, prefix, sub string) []string {
	t.Helper()
	_, _, inflight := NewProtection(client, prefix, ProtectionOptions{}).keys(sub)
	m, err := client.ZRange(t.Context(), inflight, 0, -1).Result()
	require.NoError(t, err)
	return m
}

// TestLeasedProtectionLeasesAtOnce: the first request of a subscription
// leases one; the next, finding none left in the window, leases twice as
// many; the one after that is handed one of those without a round trip,
// and a successful Finish costs none.
func TestLeasedProtectionLeasesAtOnce(t *testing.T) {
	t.Parallel()
	client, counter := countingClient(t)
	prefix := redistest.Prefix(t)
	t.Cleanup(func() { _ = redistest.DeleteKeys(context.Background(), client, "rate:"+prefix) })
	l := leased(t, client, prefix, &fakeClock{now: time.Now()})
	require.NoError(t, l.Warm(t.Context()))
	counter.take()

	for i, trips := range []int{1, 1, 0} {
		holder := fmt.Sprint("h", i)
		require.Equal(t, ports.RefusedByNone, admitLeased(t, l, leaseAdmission("s", holder, 1000, 100)).Refused)
		assert.Len(t, counter.take(), trips, "admit %s", holder)
	}
	assert.Len(t, members(t, client, prefix, "s"), 3, "three slots held, under the lease's names")
	counter.take()
	for i := range 3 {
		state := finishLeased(t, l, "s", fmt.Sprint("h", i), true)
		assert.Equal(t, domain.Breaker{Phase: domain.BreakerClosed}, state)
	}
	assert.Empty(t, counter.take(), "successes finish without a round trip")
}

// TestLeasedProtectionCapsSlotsAcrossWorkers: two workers' leases,
// admitting at once on one Redis, hold no more slots together than the
// limit, and the separate semaphore sees them held.
func TestLeasedProtectionCapsSlotsAcrossWorkers(t *testing.T) {
	t.Parallel()
	client, prefix := realLeaseClient(t)
	workers := []*LeasedProtection{leased(t, client, prefix, nil), leased(t, client, prefix, nil)}
	const callers, slots = 40, 7
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			res, err := workers[i%2].Admit(context.Background(), leaseAdmission("s", fmt.Sprint("h", i), domain.MaxRateLimit, slots))
			if assert.NoError(t, err) && res.Refused == ports.RefusedByNone {
				admitted.Add(1)
			} else {
				assert.Equal(t, ports.RefusedBySemaphore, res.Refused)
			}
		})
	}
	wg.Wait()
	// A quarter of seven slots is less than one: each lease is of one.
	assert.Equal(t, int64(slots), admitted.Load())
	assert.Len(t, members(t, client, prefix, "s"), slots)
	ok, err := NewSemaphore(client, prefix).TryAcquire(t.Context(), "s", "other", slots, time.Minute)
	require.NoError(t, err)
	assert.False(t, ok, "the separate semaphore counts the leased slots")
}

// TestLeasedProtectionSharesTheRateLimit: a lease takes its requests from
// the budget the separate rate limiter spends, and a spent budget refuses
// with the time to come back.
func TestLeasedProtectionSharesTheRateLimit(t *testing.T) {
	t.Parallel()
	client, prefix := realLeaseClient(t)
	l := leased(t, client, prefix, nil)
	limiter := NewRateLimiter(client, prefix)
	const perSecond = 10 // a burst of one
	require.Equal(t, ports.RefusedByNone, admitLeased(t, l, leaseAdmission("s", "h1", perSecond, 10)).Refused)
	ok, _, err := limiter.Take(t.Context(), "s", perSecond)
	require.NoError(t, err)
	assert.False(t, ok, "the lease took the burst")
	res := admitLeased(t, l, leaseAdmission("s", "h2", perSecond, 10))
	require.Equal(t, ports.RefusedByRateLimit, res.Refused)
	assert.Positive(t, res.RetryAfter)
	assert.LessOrEqual(t, res.RetryAfter, 100*time.Millisecond)
	assert.Len(t, members(t, client, prefix, "s"), 1, "a refused lease takes no slot")
}

// TestLeasedProtectionFailuresGoRequestByRequest: a failure is recorded on
// Redis at once and ends the lease (what it had left is not handed out);
// while the breaker stores it, requests
// go through Protection under their own names for a window; a success
// there resets the breaker, and the window after, leases come back.
func TestLeasedProtectionFailuresGoRequestByRequest(t *testing.T) {
	t.Parallel()
	client, prefix := realLeaseClient(t)
	clock := &fakeClock{now: time.Now()}
	l := leased(t, client, prefix, clock)
	breakers := NewBreakers(client, prefix)
	cfg := domain.DefaultBreakerConfig()

	for _, h := range []string{"h0", "h1"} { // leases of one, then of two: one left
		require.Equal(t, ports.RefusedByNone, admitLeased(t, l, leaseAdmission("s", h, 1000, 100)).Refused)
	}
	finishLeased(t, l, "s", "h0", true)
	state := finishLeased(t, l, "s", "h1", false)
	assert.Equal(t, domain.Breaker{Phase: domain.BreakerClosed, Failures: 1}, state)
	stored, err := client.Get(t.Context(), breakers.key("s")).Result()
	require.NoError(t, err)
	assert.Equal(t, encodeBreaker(domain.Breaker{Phase: domain.BreakerClosed, Failures: 1}), stored, "the failure is on Redis")

	require.Equal(t, ports.RefusedByNone, admitLeased(t, l, leaseAdmission("s", "h2", 1000, 100)).Refused)
	assert.Contains(t, members(t, client, prefix, "s"), "h2", "with failures stored, h2 holds a slot of its own")
	assert.Equal(t, domain.Breaker{Phase: domain.BreakerClosed}, finishLeased(t, l, "s", "h2", true), "a success resets the failures")
	assert.NotContains(t, members(t, client, prefix, "s"), "h2")

	require.Equal(t, ports.RefusedByNone, admitLeased(t, l, leaseAdmission("s", "h3", 1000, 100)).Refused)
	assert.Contains(t, members(t, client, prefix, "s"), "h3", "still the window of the failure")
	finishLeased(t, l, "s", "h3", true)
	clock.Advance(time.Hour)
	require.Equal(t, ports.RefusedByNone, admitLeased(t, l, leaseAdmission("s", "h4", 1000, 100)).Refused)
	assert.NotContains(t, members(t, client, prefix, "s"), "h4", "leased again")

	for i := range cfg.FailureThreshold {
		holder := fmt.Sprint("f", i)
		require.Equal(t, ports.RefusedByNone, admitLeased(t, l, leaseAdmission("s", holder, 1000, 100)).Refused)
		state = finishLeased(t, l, "s", holder, false)
	}
	require.Equal(t, domain.BreakerOpen, state.Phase, "failures in a row open the circuit")
	res := admitLeased(t, l, leaseAdmission("s", "late", 1000, 100))
	assert.Equal(t, ports.RefusedByBreaker, res.Refused)
	assert.True(t, res.RetryAt.After(time.Now()))
}

// TestLeasedProtectionSeesABreakerOpenedElsewhere: a breaker another
// worker opened refuses at this worker's next lease.
func TestLeasedProtectionSeesABreakerOpenedElsewhere(t *testing.T) {
	t.Parallel()
	client, prefix := realLeaseClient(t)
	clock := &fakeClock{now: time.Now()}
	l := leased(t, client, prefix, clock)
	require.Equal(t, ports.RefusedByNone, admitLeased(t, l, leaseAdmission("s", "h1", 1000, 100)).Refused)
	finishLeased(t, l, "s", "h1", true)
	breakers, cfg := NewBreakers(client, prefix), domain.DefaultBreakerConfig()
	for range cfg.FailureThreshold {
		_, err := breakers.Record(t.Context(), "s", cfg, false, time.Now())
		require.NoError(t, err)
	}
	clock.Advance(time.Hour)
	assert.Equal(t, ports.RefusedByBreaker, admitLeased(t, l, leaseAdmission("s", "h2", 1000, 100)).Refused)
}

// TestLeasedProtectionGivesBackUnusedSlots: the slots a lease did not hand
// out, and those given back by Finish, leave the set when the sweep after
// they stopped being usable runs; those in use stay until their Finish.
func TestLeasedProtectionGivesBackUnusedSlots(t *testing.T) {
	t.Parallel()
	client, prefix := realLeaseClient(t)
	clock := &fakeClock{now: time.Now()}
	l := leased(t, client, prefix, clock)
	for _, h := range []string{"h1", "h2"} { // leases of one, then of two
		require.Equal(t, ports.RefusedByNone, admitLeased(t, l, leaseAdmission("s", h, 1000, 100)).Refused)
	}
	require.Len(t, members(t, client, prefix, "s"), 3)
	finishLeased(t, l, "s", "h1", true)
	require.NoError(t, l.sweep(t.Context(), false))
	assert.Len(t, members(t, client, prefix, "s"), 3, "within the window the lease keeps its slots")

	clock.Advance(time.Hour + leaseSlotReuse) // the window, and the slots' reuse
	require.NoError(t, l.sweep(t.Context(), false))
	assert.Len(t, members(t, client, prefix, "s"), 1, "h2's slot, in use")
	finishLeased(t, l, "s", "h2", true)
	require.NoError(t, l.Close(t.Context()))
	assert.Empty(t, members(t, client, prefix, "s"), "Close gives back the rest")
}

// TestLeasedProtectionReusesSlotsThatComeBack: slots that come back from
// their requests after their lease's window serve the next lease's
// requests without new ones, while usable (leaseSlotReuse).
func TestLeasedProtectionReusesSlotsThatComeBack(t *testing.T) {
	t.Parallel()
	client, prefix := realLeaseClient(t)
	clock := &fakeClock{now: time.Now()}
	l := leased(t, client, prefix, clock)
	for _, h := range []string{"h1", "h2", "h3"} { // leases of one, then of two
		require.Equal(t, ports.RefusedByNone, admitLeased(t, l, leaseAdmission("s", h, 1000, 100)).Refused)
	}
	held := members(t, client, prefix, "s")
	require.Len(t, held, 3)
	clock.Advance(time.Hour) // the window ends while the requests are out
	for _, h := range []string{"h1", "h2", "h3"} {
		finishLeased(t, l, "s", h, true)
	}
	for _, h := range []string{"h4", "h5", "h6"} {
		require.Equal(t, ports.RefusedByNone, admitLeased(t, l, leaseAdmission("s", h, 1000, 100)).Refused)
	}
	assert.Equal(t, held, members(t, client, prefix, "s"), "the same three slots serve the next lease's requests")

	clock.Advance(leaseSlotReuse) // no longer usable once back
	for _, h := range []string{"h4", "h5", "h6"} {
		finishLeased(t, l, "s", h, true)
	}
	require.Equal(t, ports.RefusedByNone, admitLeased(t, l, leaseAdmission("s", "h7", 1000, 100)).Refused)
	now := members(t, client, prefix, "s")
	for _, name := range held {
		assert.NotContains(t, now, name, "given back")
	}
	assert.Len(t, now, 6, "new slots for a lease twice the last (it ran out within its window)")
}

// TestLeasedProtectionTakesSlotsForTheRequestsLeased: a lease that finds
// the budget nearly spent takes slots for the requests it was given, not
// for the many it asked: other workers need the slots for theirs.
func TestLeasedProtectionTakesSlotsForTheRequestsLeased(t *testing.T) {
	t.Parallel()
	client, prefix := realLeaseClient(t)
	l := leased(t, client, prefix, &fakeClock{now: time.Now()})
	const perSecond = 100 // a burst of 10, a request every 10 ms
	admit := func(holder string) ports.Refusal {
		return admitLeased(t, l, leaseAdmission("s", holder, perSecond, 100)).Refused
	}
	for i := range 7 { // leases of 1, 2 and 4, each running out in its window
		require.Equal(t, ports.RefusedByNone, admit(fmt.Sprint("h", i)))
	}
	require.Len(t, members(t, client, prefix, "s"), 7)
	limiter := NewRateLimiter(client, prefix)
	for {
		ok, _, err := limiter.Take(t.Context(), "s", perSecond)
		require.NoError(t, err)
		if !ok {
			break
		}
	}
	time.Sleep(25 * time.Millisecond) // two or three requests come back

	require.Equal(t, ports.RefusedByNone, admit("h7"), "a lease asking for 8")
	granted := l.existing("s").leased
	require.Less(t, granted, 8, "the budget had fewer than 8 requests; the test ran too slowly to tell")
	assert.Len(t, members(t, client, prefix, "s"), 7+granted, "slots for the %d requests leased", granted)
}

// TestLeasedProtectionKeepsNoMoreFreeSlotsThanItWants: a lease gives back
// the free slots beyond the requests it asks for, though still usable:
// another worker's lease may need them.
func TestLeasedProtectionKeepsNoMoreFreeSlotsThanItWants(t *testing.T) {
	t.Parallel()
	client, prefix := realLeaseClient(t)
	clock := &fakeClock{now: time.Now()}
	l := leased(t, client, prefix, clock)
	const requests = 31 // leases of 1, 2, 4, 8 and 16
	for i := range requests {
		require.Equal(t, ports.RefusedByNone, admitLeased(t, l, leaseAdmission("s", fmt.Sprint("h", i), 1000, 400)).Refused)
	}
	for i := range requests {
		finishLeased(t, l, "s", fmt.Sprint("h", i), true)
	}
	require.Len(t, members(t, client, prefix, "s"), requests)
	clock.Advance(time.Hour) // the next window: the slots are still usable
	require.Equal(t, ports.RefusedByNone, admitLeased(t, l, leaseAdmission("s", "next", 1000, 400)).Refused)
	// The last window handed out 16: the lease asks for 16 + 4 + 1.
	assert.Len(t, members(t, client, prefix, "s"), 21)
}

// TestLeasedProtectionLimitsChange: a request with other limits than the
// lease's ends it, and the next lease has the new ones.
func TestLeasedProtectionLimitsChange(t *testing.T) {
	t.Parallel()
	client, prefix := realLeaseClient(t)
	l := leased(t, client, prefix, &fakeClock{now: time.Now()})
	for _, h := range []string{"h1", "h2"} {
		require.Equal(t, ports.RefusedByNone, admitLeased(t, l, leaseAdmission("s", h, 1000, 100)).Refused)
	}
	require.Len(t, members(t, client, prefix, "s"), 3, "one slot of the second lease unused")
	assert.Equal(t, ports.RefusedBySemaphore, admitLeased(t, l, leaseAdmission("s", "h3", 1000, 2)).Refused,
		"two slots in use: the unused one went back, none is left under the new limit")
	assert.Len(t, members(t, client, prefix, "s"), 2)
}

// TestLeasedProtectionCheckArguments: bad arguments are Protection's
// errors, and nothing is asked of Redis.
func TestLeasedProtectionCheckArguments(t *testing.T) {
	t.Parallel()
	client, counter := countingClient(t)
	l := leased(t, client, redistest.Prefix(t), nil)
	counter.take()
	for _, req := range []ports.Admission{
		leaseAdmission("s", "h", 0, 1),
		leaseAdmission("s", "", 1, 1),
		leaseAdmission("s", "h", 1, 0),
		{SubscriptionID: "s", Holder: "h", PerSecond: 1, MaxInFlight: 1},
	} {
		_, err := l.Admit(t.Context(), req)
		assert.Error(t, err, "%+v", req)
	}
	assert.Empty(t, counter.take())
}

// TestLeasedProtectionRestsAfterFailure: an unreachable Redis fails the
// lease, and the calls after it rest as Protection's do.
func TestLeasedProtectionRestsAfterFailure(t *testing.T) {
	t.Parallel()
	mr, client := redistest.Mini(t)
	l := leased(t, client, "", nil)
	mr.Close()
	_, err := l.Admit(t.Context(), leaseAdmission("s", "h1", 1000, 100))
	require.Error(t, err)
	assert.NotErrorIs(t, err, ErrProtectionResting)
	_, err = l.Admit(t.Context(), leaseAdmission("s", "h2", 1000, 100))
	assert.ErrorIs(t, err, ErrProtectionResting)
}

// BenchmarkDeliveryProtectionLeasedParallel is
// BenchmarkDeliveryProtectionCombinedParallel through LeasedProtection.
func BenchmarkDeliveryProtectionLeasedParallel(b *testing.B) {
	benchmarkProtectionParallel(b, func(client goredis.UniversalClient, prefix string) ports.Protection {
		return leased(b, client, prefix, nil)
	})
}

// TestLeasedProtectionMiniredis leases on miniredis, whose Lua runs the
// lease script (as `dispatch dev` does): leases, a refusal of a full set,
// and slots given back on Close.
func TestLeasedProtectionMiniredis(t *testing.T) {
	t.Parallel()
	_, client := redistest.Mini(t)
	l := leased(t, client, "", &fakeClock{now: time.Now()})
	for i := range 3 {
		require.Equal(t, ports.RefusedByNone, admitLeased(t, l, leaseAdmission("s", fmt.Sprint("h", i), 1000, 8)).Refused)
	}
	assert.Len(t, members(t, client, "", "s"), 3, "leases of one, then of two")
	for i := 3; i < 8; i++ {
		require.Equal(t, ports.RefusedByNone, admitLeased(t, l, leaseAdmission("s", fmt.Sprint("h", i), 1000, 8)).Refused)
	}
	assert.Equal(t, ports.RefusedBySemaphore, admitLeased(t, l, leaseAdmission("s", "h8", 1000, 8)).Refused)
	for i := range 8 {
		finishLeased(t, l, "s", fmt.Sprint("h", i), true)
	}
	require.NoError(t, l.Close(t.Context()))
	assert.Empty(t, members(t, client, "", "s"))
}
