package protectiontest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatch-webhooks/dispatch/ports"
)

// Leases the semaphore suite uses.
const (
	// longLease never runs out during a test.
	longLease = time.Minute
	// clockLease is a lease the suite moves the clock past.
	clockLease = 10 * time.Second
	// realLease is a lease the suite waits out in real time: short, so
	// tests stay quick, and long enough to check it is not over at once.
	realLease = 300 * time.Millisecond
)

// RunSemaphore runs the contract suite of ports.Semaphore. newSemaphore
// returns a fresh semaphore, every slot free, for one test (a new instance,
// or a shared server with a key prefix per test); tests run in parallel.
func RunSemaphore(t *testing.T, newSemaphore func(t *testing.T) ports.Semaphore, features Features) {
	t.Helper()
	s := semSuite{newSemaphore: newSemaphore, f: features}
	tests := []struct {
		name string
		fn   func(t *testing.T)
	}{
		{"LimitUnderConcurrency", s.testLimitUnderConcurrency},
		{"ReleaseFrees", s.testReleaseFrees},
		{"DoubleRelease", s.testDoubleRelease},
		{"ExpiredLeasesFree", s.testExpiredLeasesFree},
		{"SubscriptionsAreIndependent", s.testSubscriptionsAreIndependent},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t)
		})
	}
}

type semSuite struct {
	newSemaphore func(t *testing.T) ports.Semaphore
	f            Features
}

func acquire(t *testing.T, s ports.Semaphore, sub, holder string, limit int, ttl time.Duration) bool {
	t.Helper()
	ok, err := s.TryAcquire(ctxFor(t), sub, holder, limit, ttl)
	require.NoError(t, err)
	return ok
}

func release(t *testing.T, s ports.Semaphore, sub, holder string) {
	t.Helper()
	require.NoError(t, s.Release(ctxFor(t), sub, holder))
}

// testLimitUnderConcurrency has 50 goroutines race for 10 slots: exactly 10
// win, and once they release, 10 others do.
func (s semSuite) testLimitUnderConcurrency(t *testing.T) {
	sem, ctx := s.newSemaphore(t), ctxFor(t)
	const workers, limit = 50, 10
	race := func(round string) []string {
		var mu sync.Mutex
		var won []string
		errs := make(chan error, workers)
		var wg sync.WaitGroup
		for i := range workers {
			wg.Go(func() {
				holder := fmt.Sprintf("%s-%d", round, i)
				ok, err := sem.TryAcquire(ctx, subA, holder, limit, longLease)
				if err != nil {
					errs <- err
					return
				}
				if ok {
					mu.Lock()
					won = append(won, holder)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		return won
	}
	won := race("first")
	require.Len(t, won, limit, "exactly limit of %d concurrent TryAcquires win", workers)
	assert.Empty(t, race("full"), "no slot while all are held")
	for _, h := range won {
		release(t, sem, subA, h)
	}
	assert.Len(t, race("again"), limit, "released slots are taken again")
}

func (s semSuite) testReleaseFrees(t *testing.T) {
	sem := s.newSemaphore(t)
	const limit = 3
	for i := range limit {
		require.True(t, acquire(t, sem, subA, fmt.Sprint("h", i), limit, longLease))
	}
	assert.False(t, acquire(t, sem, subA, "late", limit, longLease), "all %d slots are taken", limit)
	release(t, sem, subA, "h1")
	assert.True(t, acquire(t, sem, subA, "late", limit, longLease), "a released slot can be taken")
	assert.False(t, acquire(t, sem, subA, "later", limit, longLease), "Release frees one slot, not more")
}

func (s semSuite) testDoubleRelease(t *testing.T) {
	sem := s.newSemaphore(t)
	const limit = 2
	require.True(t, acquire(t, sem, subA, "a", limit, longLease))
	require.True(t, acquire(t, sem, subA, "b", limit, longLease))
	release(t, sem, subA, "a")
	release(t, sem, subA, "a") // not held any more: not an error
	release(t, sem, subA, "never-held")
	release(t, sem, subB, "never-held") // a subscription never seen
	assert.True(t, acquire(t, sem, subA, "c", limit, longLease), "a's slot is free")
	assert.False(t, acquire(t, sem, subA, "d", limit, longLease), "releasing a twice freed one slot only")
}

// testExpiredLeasesFree fills the slots, lets some leases run out without
// a Release (the holders died), and takes those slots again. One holder
// keeps a long lease throughout, so the slots must come back lease by
// lease, not only when everything is gone.
func (s semSuite) testExpiredLeasesFree(t *testing.T) {
	sem := s.newSemaphore(t)
	const limit = 3
	require.True(t, acquire(t, sem, subA, "keeper", limit, longLease))
	if s.f.AdvanceSemaphore != nil {
		require.True(t, acquire(t, sem, subA, "a", limit, clockLease))
		require.True(t, acquire(t, sem, subA, "b", limit, clockLease))
		s.f.AdvanceSemaphore(t, sem, clockLease-time.Millisecond)
		assert.False(t, acquire(t, sem, subA, "c", limit, clockLease), "a millisecond before the leases end they still count")
		s.f.AdvanceSemaphore(t, sem, time.Millisecond)
		assert.True(t, acquire(t, sem, subA, "c", limit, clockLease), "a lease that ran out frees its slot")
		assert.True(t, acquire(t, sem, subA, "d", limit, clockLease), "both leases ran out")
		assert.False(t, acquire(t, sem, subA, "e", limit, clockLease), "the new leases count")
		release(t, sem, subA, "a") // its lease ran out: not an error
		assert.False(t, acquire(t, sem, subA, "e", limit, clockLease), "releasing an expired holder frees nothing")
		return
	}

	start := time.Now()
	require.True(t, acquire(t, sem, subA, "a", limit, realLease))
	require.True(t, acquire(t, sem, subA, "b", limit, realLease))
	// Both leases started after start, so they end no sooner than
	// start+realLease (less the adapter's millisecond rounding).
	earliestEnd := start.Add(realLease - time.Millisecond)
	for _, holder := range []string{"c", "d"} {
		deadline := time.Now().Add(waitFor)
		for !acquire(t, sem, subA, holder, limit, realLease) {
			if time.Now().After(deadline) {
				t.Fatalf("waited %s for the leases of a and b (%s) to run out and free a slot for %s", waitFor, realLease, holder)
			}
			time.Sleep(pollEvery(realLease))
		}
		assert.False(t, time.Now().Before(earliestEnd), "a slot was free for %s before the leases could have run out", holder)
	}
	release(t, sem, subA, "a") // its lease ran out: not an error
	assert.False(t, acquire(t, sem, subA, "e", limit, realLease), "releasing an expired holder frees nothing")
}

func (s semSuite) testSubscriptionsAreIndependent(t *testing.T) {
	sem := s.newSemaphore(t)
	require.True(t, acquire(t, sem, subA, "a", 1, longLease))
	require.False(t, acquire(t, sem, subA, "b", 1, longLease))
	assert.True(t, acquire(t, sem, subB, "b", 1, longLease), "%s has its own slots", subB)
	release(t, sem, subB, "a") // a holds a slot of subA, not of subB
	assert.False(t, acquire(t, sem, subA, "c", 1, longLease), "releasing a holder under another subscription frees nothing")
}
