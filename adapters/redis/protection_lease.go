package redis

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

//go:embed protection_lease.lua
var protectionLeaseLua string

var protectionLease = goredis.NewScript(protectionLeaseLua)

// DefaultLeaseWindow is LeaseOptions.Window's default.
const DefaultLeaseWindow = 100 * time.Millisecond

// LeaseOptions configures a LeasedProtection. The zero value is valid.
type LeaseOptions struct {
	// Window is how long a lease's requests may be handed out after it was
	// taken; 0 means DefaultLeaseWindow. It bounds how long this worker
	// goes on delivering to an endpoint whose breaker another worker
	// opened, and how long slots it no longer uses stay taken.
	Window time.Duration
	// Now is the clock windows are measured by; nil means time.Now.
	Now func() time.Time
}

// LeasedProtection is ports.Protection for a worker that delivers many
// requests to the same endpoints: instead of a script per Admit and per
// Finish, it leases a share of a subscription's protections at once (n
// requests from its rate limit's budget and n slots of its semaphore, in
// one call of protection_lease.lua) and hands them to its deliveries
// without asking Redis again, for up to Window. A delivery to a healthy
// endpoint then costs Redis a fraction of a script, and the worker no
// round trip at all. W4 (fifty subscriptions) spent ~30 % of the machine's
// time per delivery on the per-request scripts: both the scripts' Lua and
// the worker's side of the round trips (docs/performance.md).
//
// What every worker shares stays shared and bounded:
//   - the slots are members of the same sorted set, with TTL leases, so
//     the workers together never hold more than max_in_flight, and a dead
//     worker's come back when their lease ends (a window and
//     leaseSlotReuse later than a request's own). A slot that comes back
//     from its request serves the lease's next requests while usable
//     (leaseSlotReuse past its window), and the next lease takes new slots
//     only for the requests those do not cover; slots no longer usable go
//     back at the next lease or the next sweep (every window);
//   - the requests are taken from the same GCRA budget before they are
//     made, so the workers together never exceed the rate limit. A lease's
//     requests not handed out within its window are not given back;
//     leases are sized from the last window's demand (and double when one
//     runs out), so little of the budget goes unused;
//   - a lease is taken only while no breaker is stored: the endpoint's
//     last result was a success. A failure goes to Redis at once, as with
//     Protection, and ends this worker's lease; while a breaker is stored
//     (failures counted, open, half-open) every request of that
//     subscription goes through Protection, request by request, for a
//     window at a time, so its results are counted in order. The one
//     difference from Protection: another worker's successes during its
//     lease are not counted, so its failures in a row are counted across
//     those successes, for at most a window.
//
// Limits that change end the subscription's lease (the next is taken with
// the new ones). Close gives back the slots not in use.
type LeasedProtection struct {
	p      *Protection
	window time.Duration
	now    func() time.Time
	// name prefixes this process's slot names; seq numbers them.
	name string
	seq  atomic.Int64

	mu   sync.Mutex
	subs map[string]*allowance

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

var _ ports.Protection = (*LeasedProtection)(nil)

// allowance is one subscription's lease in this process.
type allowance struct {
	mu sync.Mutex
	// The limits the lease was taken for.
	perSecond, maxInFlight int
	lease                  time.Duration
	// until ends the current lease's requests, of which tokens are left.
	until  time.Time
	tokens int
	// free are slots held and not in use, each usable until its own time.
	free []leasedSlot
	// inUse are the slots handed out, by holder.
	inUse map[string]leasedSlot
	// back are slots to give back: no longer usable, or not wanted.
	back []string
	// leased is how many requests the current lease took, handed how many
	// of them were handed out.
	leased, handed int
	// exactUntil: while a breaker is stored, requests go through
	// Protection until then.
	exactUntil time.Time
	// seen is when the allowance was last used, for the sweep to forget it;
	// forgotten is set once it has (a caller holding it then takes the
	// subscription's new one).
	seen      time.Time
	forgotten bool
}

// leasedSlot is a slot of the lease set this process holds: its member's
// name, and until when it may be handed to a request (its member outlives
// that by at least the request's lease).
type leasedSlot struct {
	name        string
	usableUntil time.Time
}

// leaseSlotReuse is how long after it was taken, past the lease's window,
// a leased slot may still be handed to a request: its member is kept in
// Redis that much longer than a request's lease. A slot comes back from
// its request (200 ms later in W5) after the window that took it has
// ended; without this it would be given back and a new one taken for the
// next request, a lease per delivery while an endpoint's slots are all in
// use. A killed worker's slots come back this much later.
const leaseSlotReuse = time.Second

// NewLeasedProtection returns a LeasedProtection on p's client, keys and
// options, and starts its sweep; Close stops it.
func NewLeasedProtection(p *Protection, opts LeaseOptions) *LeasedProtection {
	if opts.Window <= 0 {
		opts.Window = DefaultLeaseWindow
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	var id [6]byte
	_, _ = rand.Read(id[:])
	l := &LeasedProtection{
		p: p, window: opts.Window, now: opts.Now,
		name: "lease:" + hex.EncodeToString(id[:]) + ":",
		subs: make(map[string]*allowance),
		stop: make(chan struct{}), done: make(chan struct{}),
	}
	go l.sweepEvery()
	return l
}

// Warm loads Protection's scripts and the lease script into Redis.
func (l *LeasedProtection) Warm(ctx context.Context) error {
	if err := l.p.Warm(ctx); err != nil {
		return err
	}
	if err := protectionLease.Load(ctx, l.p.client).Err(); err != nil {
		return fmt.Errorf("redis protection: load script: %w", err)
	}
	return nil
}

// Admit hands holder one of the subscription's leased requests, leasing
// more when none is left; see LeasedProtection and ports.Protection.
func (l *LeasedProtection) Admit(ctx context.Context, req ports.Admission) (ports.Admitted, error) {
	if err := checkAdmission(req); err != nil {
		return ports.Admitted{}, err
	}
	a := l.allowance(req.SubscriptionID)
	a.mu.Lock()
	for a.forgotten {
		a.mu.Unlock()
		a = l.allowance(req.SubscriptionID)
		a.mu.Lock()
	}
	defer a.mu.Unlock()
	now := l.now()
	a.seen = now
	if a.perSecond != req.PerSecond || a.maxInFlight != req.MaxInFlight || a.lease != req.Lease {
		a.end()
		a.perSecond, a.maxInFlight, a.lease = req.PerSecond, req.MaxInFlight, req.Lease
		a.leased, a.handed = 0, 0
	}
	if a.hand(req.Holder, now) {
		return ports.Admitted{}, nil
	}
	if now.Before(a.exactUntil) {
		return l.p.Admit(ctx, req)
	}
	var admitted ports.Admitted
	var exact bool
	err := l.p.guarded(ctx, "lease for "+req.SubscriptionID, func(ctx context.Context) (err error) {
		admitted, exact, err = l.lease(ctx, a, req, now)
		return err
	})
	if err != nil {
		return ports.Admitted{}, err
	}
	if exact {
		a.exactUntil = now.Add(l.window)
		return l.p.Admit(ctx, req)
	}
	return admitted, nil
}

// lease runs protection_lease.lua for a: it gives back the slots a no
// longer uses and the free ones beyond the requests it wants, takes
// requests from the budget, and takes new slots for those its usable free
// slots do not cover; then it hands holder the first request. exact
// reports a stored breaker: nothing was leased.
func (l *LeasedProtection) lease(ctx context.Context, a *allowance, req ports.Admission, now time.Time) (_ ports.Admitted, exact bool, err error) {
	want := a.nextSize(now, leaseCap(req))
	a.tokens = 0 // the last lease's requests left are dropped
	a.dropUnusable(now)
	if extra := len(a.free) - want; extra > 0 {
		// More free slots than the lease can use go back, the oldest
		// first: other workers' leases may need them.
		for _, slot := range a.free[:extra] {
			a.back = append(a.back, slot.name)
		}
		a.free = append(a.free[:0], a.free[extra:]...)
	}
	usable := len(a.free)
	newSlots := max(0, want-usable)
	back := a.back
	first := l.seq.Add(int64(newSlots)) - int64(newSlots)
	breakerKey, rateKey, inflightKey := l.p.keys(req.SubscriptionID)
	ttl := req.Lease + l.window + leaseSlotReuse
	args := make([]any, 0, 10+len(back))
	args = append(args, RateBurst(req.PerSecond), req.PerSecond, 1, req.MaxInFlight,
		(ttl + time.Millisecond - 1).Milliseconds(), want, newSlots, usable, l.name, first)
	for _, name := range back {
		args = append(args, name)
	}
	res, err := protectionLease.Run(ctx, l.p.client, []string{breakerKey, rateKey, inflightKey}, args...).Slice()
	if err != nil {
		// The slots may or may not be given back: they are asked again
		// (giving back one that is gone does nothing).
		return ports.Admitted{}, false, interpretError(err)
	}
	a.back = nil
	code, _ := res[0].(int64)
	switch {
	case code == 0:
		a.end() // requests go one by one for a while: the free slots go back
		return ports.Admitted{}, true, nil
	case code == 3:
		return ports.Admitted{Refused: ports.RefusedBySemaphore}, false, nil
	case code == 2 && len(res) == 2:
		refused, err := rateRefusal("lease", res[1])
		return refused, false, err
	case code == 1 && len(res) == 3:
		tokens, _ := res[1].(int64)
		added, _ := res[2].(int64)
		if tokens < 1 || tokens > int64(want) || added < 0 || added > int64(newSlots) || usable+int(added) < 1 {
			return ports.Admitted{}, false, fmt.Errorf("lease script leased %d requests of %d and %d slots of %d", tokens, want, added, newSlots)
		}
		a.until = now.Add(l.window)
		a.tokens, a.leased, a.handed = int(tokens), int(tokens), 0
		usableUntil := now.Add(l.window + leaseSlotReuse)
		for i := range added {
			a.free = append(a.free, leasedSlot{name: l.name + strconv.FormatInt(first+i, 10), usableUntil: usableUntil})
		}
		a.hand(req.Holder, now)
		return ports.Admitted{}, false, nil
	}
	return ports.Admitted{}, false, fmt.Errorf("lease script answered %v", res)
}

// leaseCap bounds a lease's size: a tenth of a second's rate (the burst),
// and a quarter of the slots, leaving the rest to other workers.
func leaseCap(req ports.Admission) int {
	return max(1, min(RateBurst(req.PerSecond), req.MaxInFlight/4))
}

// nextSize is how many requests the next lease asks for: twice the last
// when it ran out within its window, else what the last window handed out
// and a quarter more.
func (a *allowance) nextSize(now time.Time, limit int) int {
	n := a.handed + a.handed/4 + 1
	if now.Before(a.until) {
		n = 2 * a.leased
	}
	return max(1, min(n, limit))
}

// hand gives holder one of the lease's requests and one of its usable
// free slots, if it has both.
func (a *allowance) hand(holder string, now time.Time) bool {
	if a.tokens == 0 || !now.Before(a.until) {
		return false
	}
	a.dropUnusable(now)
	if len(a.free) == 0 {
		return false
	}
	if old, ok := a.inUse[holder]; ok {
		// Admitted again before its Finish: its old slot is given back.
		a.back = append(a.back, old.name)
	}
	if a.inUse == nil {
		a.inUse = make(map[string]leasedSlot)
	}
	// The oldest first: it stops being usable soonest.
	a.inUse[holder] = a.free[0]
	a.free = a.free[1:]
	a.tokens--
	a.handed++
	return true
}

// dropUnusable moves the free slots no longer usable at now to back.
func (a *allowance) dropUnusable(now time.Time) {
	kept := a.free[:0]
	for _, slot := range a.free {
		if now.Before(slot.usableUntil) {
			kept = append(kept, slot)
		} else {
			a.back = append(a.back, slot.name)
		}
	}
	a.free = kept
}

// end ends the current lease: its requests left are dropped and its free
// slots are to be given back.
func (a *allowance) end() {
	for _, slot := range a.free {
		a.back = append(a.back, slot.name)
	}
	a.free = a.free[:0]
	a.tokens = 0
}

// Finish ends a request: a leased one gives its slot back to the lease
// (no round trip; the slot serves another request while usable) when it
// succeeded; a failure is recorded through
// Protection at once and ends the lease. A request Admit let through
// Protection finishes there. See ports.Protection.
func (l *LeasedProtection) Finish(ctx context.Context, subscriptionID, holder string, cfg domain.BreakerConfig, success bool, now time.Time) (domain.Breaker, error) {
	if a := l.existing(subscriptionID); a != nil {
		a.mu.Lock()
		s, ok := a.inUse[holder]
		if ok {
			delete(a.inUse, holder)
			a.seen = l.now()
			if a.seen.Before(s.usableUntil) {
				a.free = append(a.free, s)
			} else {
				a.back = append(a.back, s.name)
			}
			if !success {
				a.end()
				a.until = time.Time{}
			}
		}
		a.mu.Unlock()
		if ok && success {
			return domain.Breaker{Phase: domain.BreakerClosed}, nil
		}
	}
	// The holder has no slot in the sorted set under its own name when it
	// was leased: Protection's finish records the result and gives back
	// nothing.
	return l.p.Finish(ctx, subscriptionID, holder, cfg, success, now)
}

// allowance returns the subscription's allowance, made on first use.
func (l *LeasedProtection) allowance(subscriptionID string) *allowance {
	l.mu.Lock()
	defer l.mu.Unlock()
	a, ok := l.subs[subscriptionID]
	if !ok {
		a = &allowance{}
		l.subs[subscriptionID] = a
	}
	return a
}

// existing returns the subscription's allowance, or nil.
func (l *LeasedProtection) existing(subscriptionID string) *allowance {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.subs[subscriptionID]
}

// sweepEvery gives back, every window, the slots no longer usable or
// wanted.
func (l *LeasedProtection) sweepEvery() {
	defer close(l.done)
	tick := time.NewTicker(l.window)
	defer tick.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-tick.C:
			ctx, cancel := context.WithTimeout(context.Background(), l.p.opts.Timeout)
			_ = l.sweep(ctx, false)
			cancel()
		}
	}
}

// forgetAfter is how long an allowance with nothing in use and nothing to
// give back is kept unused before the sweep forgets it.
const forgetAfter = time.Minute

// sweep gives back the slots no longer usable or wanted (every slot not in
// use, when all), in one round trip, and forgets allowances long unused.
// Slots whose giving back fails are asked again next time.
func (l *LeasedProtection) sweep(ctx context.Context, all bool) error {
	now := l.now()
	back := make(map[string][]string)
	l.mu.Lock()
	for sub, a := range l.subs {
		a.mu.Lock()
		if all {
			a.end()
		} else {
			a.dropUnusable(now)
		}
		if len(a.back) > 0 {
			back[sub] = a.back
			a.back = nil
		}
		if len(a.inUse) == 0 && len(a.free) == 0 && len(a.back) == 0 && now.Sub(a.seen) > forgetAfter {
			a.forgotten = true
			delete(l.subs, sub)
		}
		a.mu.Unlock()
	}
	l.mu.Unlock()
	if len(back) == 0 {
		return nil
	}
	pipe := l.p.client.Pipeline()
	for sub, names := range back {
		_, _, inflight := l.p.keys(sub)
		members := make([]any, len(names))
		for i, n := range names {
			members[i] = n
		}
		pipe.ZRem(ctx, inflight, members...)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		for sub, names := range back {
			a := l.allowance(sub)
			a.mu.Lock()
			a.back = append(a.back, names...)
			a.mu.Unlock()
		}
		return fmt.Errorf("redis protection: give back leased slots: %w", err)
	}
	return nil
}

// Close stops the sweep and gives back every slot not in use. Safe to call
// more than once.
func (l *LeasedProtection) Close(ctx context.Context) error {
	l.closeOnce.Do(func() { close(l.stop) })
	<-l.done
	return l.sweep(ctx, true)
}

// checkAdmission is Admit's check of its arguments, Protection's.
func checkAdmission(req ports.Admission) error {
	if req.PerSecond < 1 {
		return fmt.Errorf("redis protection: %s: rate must be at least 1 request per second, got %d", req.SubscriptionID, req.PerSecond)
	}
	if err := checkSemaphoreArgs(req.SubscriptionID, req.Holder, req.MaxInFlight, req.Lease); err != nil {
		return fmt.Errorf("redis protection: %w", err)
	}
	return nil
}
