package redis

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

//go:embed protection_admit.lua
var protectionAdmitLua string

//go:embed protection_finish.lua
var protectionFinishLua string

// The Protection scripts run by EVALSHA, falling back to EVAL the first
// time a server has not seen them.
var (
	protectionAdmit  = goredis.NewScript(protectionAdmitLua)
	protectionFinish = goredis.NewScript(protectionFinishLua)
)

// ErrProtectionResting is what Protection answers, without asking Redis,
// for a while after Redis failed: the caller falls back to its local
// protection at once instead of waiting on an unreachable server for every
// delivery.
var ErrProtectionResting = errors.New("redis protection: resting after a failure")

// DefaultProtectionRetryInterval is ProtectionOptions.RetryInterval's
// default, and DefaultProtectionTimeout its Timeout's: Redis answers in
// well under a millisecond when healthy, so a second is a Redis that is
// not answering.
const (
	DefaultProtectionRetryInterval = 5 * time.Second
	DefaultProtectionTimeout       = time.Second
)

// ProtectionOptions configures a Protection. The zero value is valid.
type ProtectionOptions struct {
	// RetryInterval is how long Protection answers ErrProtectionResting
	// after a call failed, before asking Redis again. 0 means
	// DefaultProtectionRetryInterval.
	RetryInterval time.Duration
	// Timeout bounds each call to Redis: a Redis behind a partition never
	// answers. 0 means DefaultProtectionTimeout.
	Timeout time.Duration
	// Now is the clock RetryInterval is measured by; nil means time.Now.
	Now func() time.Time
	// Unbatched sends each call's script on a round trip of its own
	// instead of sharing one with concurrent calls (see Protection): for
	// comparisons, and for a deployment that would rather trade throughput
	// for the last microsecond of a lone call's latency.
	Unbatched bool
}

// Protection is ports.Protection on Redis: each subscription's breaker
// (one string key), GCRA rate limit (one key, read by the server's clock,
// TIME, so workers with skewed clocks agree; burst RateBurst) and slots (a
// sorted set of holders by lease end) under the hash tag {sub:<id>}, in
// one Lua script per Admit and one per Finish.
//
// The breaker's transitions stay domain.Breaker's, computed in Go: the
// scripts handle only what needs no transition (a closed breaker allows; a
// success on a closed breaker resets it) and otherwise hand the stored
// value back, for Go to compute the transition and store it with the
// compare-and-set of breakerStore. That costs an open or half-open breaker,
// or a failure, one or two round trips more: the rare path.
//
// Concurrent calls share round trips: the scripts of the Admit calls that
// arrive while one pipeline is on its way go together in the next (one
// write, one read for all of them), and likewise for Finish, so a worker
// running hundreds of deliveries at once pays a round trip per batch, not
// per delivery. Each call still gets its own answer (see
// protectionScript); the breaker's compare-and-set stays one call each.
// The Admits of one batch to one subscription with the same limits go in
// one call of protection_admit.lua, which reads and writes the breaker,
// the rate limit and the lease set once for all of them, which is what a
// subscription taking most of the traffic needs (Redis then does one
// script's work per batch, not per delivery). Likewise the Finishes of one batch to one
// subscription go in one call of protection_finish.lua.
//
// After a failed call it rests for RetryInterval (see ErrProtectionResting).
// Safe for concurrent use.
type Protection struct {
	client   goredis.UniversalClient
	prefix   string
	breakers *breakerStore
	opts     ProtectionOptions
	// admitScript and finishScript run protection_admit.lua and
	// protection_finish.lua, batching concurrent calls.
	admitScript, finishScript *protectionScript
	// restUntil is when to ask Redis again after a failure, Unix ns; 0
	// while Redis answers.
	restUntil atomic.Int64
}

var _ ports.Protection = (*Protection)(nil)

// NewProtection returns a Protection keeping its state under prefix (""
// means DefaultPrefix). The
// caller owns client and closes it. A nil client or a prefix with '{' or
// '}' is a programming error and panics.
func NewProtection(client goredis.UniversalClient, prefix string, opts ProtectionOptions) *Protection {
	prefix = checkedPrefix("protection", client, prefix)
	if opts.RetryInterval <= 0 {
		opts.RetryInterval = DefaultProtectionRetryInterval
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultProtectionTimeout
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	p := &Protection{
		client:       client,
		prefix:       prefix,
		breakers:     newBreakerStore(client),
		opts:         opts,
		admitScript:  newProtectionScript(client, protectionAdmit, opts.Timeout, opts.Unbatched, false),
		finishScript: newProtectionScript(client, protectionFinish, opts.Timeout, opts.Unbatched, true),
	}
	p.admitScript.combine = admitCall
	p.finishScript.combine = finishCall
	return p
}

// finishCall is protection_finish.lua's KEYS and ARGV for Finish runs of
// one subscription (their group is its breaker key): its keys, then each
// run's holder and result. A run's own args are {holder, result}.
func finishCall(runs []scriptRun) ([]string, []any) {
	args := make([]any, 0, 2*len(runs))
	for _, r := range runs {
		args = append(args, r.args...)
	}
	return runs[0].keys, args
}

// admitCall is protection_admit.lua's KEYS and ARGV for Admit runs of one
// group: the subscription's keys and limits, which the group shares (see
// admitGroup), then each run's holder, lease and breaker flag. A run's own
// args are {burst, rate, period, holder, slot limit, lease ms, passed}.
func admitCall(runs []scriptRun) ([]string, []any) {
	first := runs[0].args
	args := make([]any, 0, 4+3*len(runs))
	args = append(args, first[0], first[1], first[2], first[4])
	for _, r := range runs {
		args = append(args, r.args[3], r.args[5], r.args[6])
	}
	return runs[0].keys, args
}

// admitGroup names the Admit runs one call of protection_admit.lua may
// carry together: those of one subscription (its breaker key) with the
// same rate and slot limit.
func admitGroup(breakerKey string, perSecond, maxInFlight int) string {
	return breakerKey + " " + strconv.Itoa(perSecond) + " " + strconv.Itoa(maxInFlight)
}

// Warm loads the Admit and Finish scripts into Redis, so that a worker's
// first deliveries after Redis restarted (or on a new server) do not each
// pay a NOSCRIPT answer and a second round trip to send the script.
func (p *Protection) Warm(ctx context.Context) error {
	for _, script := range []*goredis.Script{protectionAdmit, protectionFinish} {
		if err := script.Load(ctx, p.client).Err(); err != nil {
			return fmt.Errorf("redis protection: load script: %w", err)
		}
	}
	return nil
}

// keys are the subscription's breaker, rate and lease keys (the rate key
// keeps the "rate:" in front that redis_rate, whose GCRA the admit script
// runs, gave it, so existing budgets carry over).
func (p *Protection) keys(subscriptionID string) (breaker, rate, inflight string) {
	tag := "{sub:" + subscriptionID + "}"
	return p.prefix + tag + ":breaker", "rate:" + p.prefix + tag + ":rate", p.prefix + tag + ":inflight"
}

// Admit asks the three protections in one script; see ports.Protection.
// Bad arguments (a rate or limit below 1, an empty holder, a lease of 0)
// are errors.
func (p *Protection) Admit(ctx context.Context, req ports.Admission) (ports.Admitted, error) {
	if err := checkAdmission(req); err != nil {
		return ports.Admitted{}, err
	}
	var admitted ports.Admitted
	err := p.guarded(ctx, "admit "+req.Holder+" for "+req.SubscriptionID, func(ctx context.Context) (err error) {
		admitted, err = p.admit(ctx, req)
		return err
	})
	return admitted, err
}

func (p *Protection) admit(ctx context.Context, req ports.Admission) (ports.Admitted, error) {
	breakerKey, rateKey, inflightKey := p.keys(req.SubscriptionID)
	keys := []string{breakerKey, rateKey, inflightKey}
	ttlMS := (req.Lease + time.Millisecond - 1).Milliseconds()
	args := []any{RateBurst(req.PerSecond), req.PerSecond, 1, req.Holder, req.MaxInFlight, ttlMS, "0"}
	group := admitGroup(breakerKey, req.PerSecond, req.MaxInFlight)
	res, err := p.admitScript.run(ctx, scriptRun{keys: keys, args: args, group: group})
	if err != nil {
		return ports.Admitted{}, interpretError(err)
	}
	if len(res) == 0 {
		return ports.Admitted{}, errors.New("admit script answered nothing")
	}
	if code, _ := res[0].(int64); code == 0 && len(res) == 2 {
		// The breaker is open or half-open: its transition in Go, then the
		// rest of the script without it.
		stored, _ := res[1].(string)
		var allowed bool
		var retryAt time.Time
		_, err := p.breakers.updateFrom(ctx, breakerKey, stored, req.Now, func(s domain.Breaker) domain.Breaker {
			next, ok, at := s.Allow(req.Breaker, req.Now)
			allowed, retryAt = ok, at
			return next
		})
		if err != nil {
			return ports.Admitted{}, err
		}
		if !allowed {
			return ports.Admitted{Refused: ports.RefusedByBreaker, RetryAt: retryAt}, nil
		}
		args[len(args)-1] = "1"
		if res, err = p.admitScript.run(ctx, scriptRun{keys: keys, args: args, group: group}); err != nil {
			return ports.Admitted{}, interpretError(err)
		}
	}
	return admitResult(res)
}

// admitResult reads protection_admit.lua's answer once the breaker passed.
func admitResult(res []any) (ports.Admitted, error) {
	if len(res) == 0 {
		return ports.Admitted{}, errors.New("admit script answered nothing")
	}
	code, _ := res[0].(int64)
	switch {
	case code == 1:
		return ports.Admitted{}, nil
	case code == 3:
		return ports.Admitted{Refused: ports.RefusedBySemaphore}, nil
	case code == 2 && len(res) == 2:
		return rateRefusal("admit", res[1])
	}
	return ports.Admitted{}, fmt.Errorf("admit script answered %v", res)
}

// rateRefusal reads the retry-after seconds a script (named by script)
// answers with a rate-limit refusal.
func rateRefusal(script string, retryAfter any) (ports.Admitted, error) {
	s, _ := retryAfter.(string)
	seconds, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return ports.Admitted{}, fmt.Errorf("%s script answered retry after %q: %w", script, s, err)
	}
	return ports.Admitted{Refused: ports.RefusedByRateLimit, RetryAfter: rateRetryAfter(time.Duration(seconds * float64(time.Second)))}, nil
}

// Finish releases holder's slot and records the result; see
// ports.Protection.
func (p *Protection) Finish(ctx context.Context, subscriptionID, holder string, cfg domain.BreakerConfig, success bool, now time.Time) (domain.Breaker, error) {
	var state domain.Breaker
	err := p.guarded(ctx, "finish "+holder+" for "+subscriptionID, func(ctx context.Context) (err error) {
		state, err = p.finish(ctx, subscriptionID, holder, cfg, success, now)
		return err
	})
	return state, err
}

// guarded runs call with Timeout unless resting (ErrProtectionResting,
// returned as it is), starts a rest when it fails and ends one when it
// answers; what names the call in its error.
func (p *Protection) guarded(ctx context.Context, what string, call func(context.Context) error) error {
	if err := p.resting(); err != nil {
		return err
	}
	callCtx, cancel := context.WithTimeout(ctx, p.opts.Timeout)
	defer cancel()
	if err := call(callCtx); err != nil {
		p.failed(ctx)
		return fmt.Errorf("redis protection: %s: %w", what, err)
	}
	p.recovered()
	return nil
}

func (p *Protection) finish(ctx context.Context, subscriptionID, holder string, cfg domain.BreakerConfig, success bool, now time.Time) (domain.Breaker, error) {
	breakerKey, _, inflightKey := p.keys(subscriptionID)
	ok := "0"
	if success {
		ok = "1"
	}
	res, err := p.finishScript.run(ctx, scriptRun{keys: []string{inflightKey, breakerKey}, args: []any{holder, ok}, group: breakerKey})
	if err != nil {
		return domain.Breaker{}, interpretError(err)
	}
	if len(res) == 1 {
		if code, _ := res[0].(int64); code == 1 {
			return domain.Breaker{Phase: domain.BreakerClosed}, nil
		}
	}
	if len(res) != 2 {
		return domain.Breaker{}, fmt.Errorf("finish script answered %v", res)
	}
	stored, _ := res[1].(string)
	return p.breakers.updateFrom(ctx, breakerKey, stored, now, func(s domain.Breaker) domain.Breaker {
		return s.Record(cfg, success, now)
	})
}

// resting returns ErrProtectionResting while a failure is recent.
func (p *Protection) resting() error {
	until := p.restUntil.Load()
	if until != 0 && p.opts.Now().UnixNano() < until {
		return ErrProtectionResting
	}
	return nil
}

// recovered ends a rest, if one was on (a load before the store keeps the
// hot path from writing a shared cache line on every call).
func (p *Protection) recovered() {
	if p.restUntil.Load() != 0 {
		p.restUntil.Store(0)
	}
}

// failed starts a rest, unless the failure came from the caller's own
// context ending (parent), which says nothing about Redis. A call that ran
// out of Timeout does count: Redis did not answer in time.
func (p *Protection) failed(parent context.Context) {
	if parent.Err() != nil {
		return
	}
	p.restUntil.Store(p.opts.Now().Add(p.opts.RetryInterval).UnixNano())
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

// RateBurst is the burst Protection's rate limit allows at perSecond
// requests a second: a tenth of a second's worth, at least 1. GCRA lets
// burst requests through at once and then one every 1/perSecond s, so any
// 1-second window sees at most perSecond + RateBurst(perSecond) admitted
// requests (110 at the default 100/s), while workers that picked up a
// batch together are not turned away for being a few milliseconds early.
func RateBurst(perSecond int) int {
	return max(1, perSecond/10)
}

// rateRetryAfter is the wait the GCRA script reported, as Admit reports
// it. The script computes in float seconds from TIME's microseconds: round
// up to a whole microsecond so that retrying after it is not turned away
// for a rounding error, and never report "now".
func rateRetryAfter(d time.Duration) time.Duration {
	return max((d + time.Microsecond - 1).Truncate(time.Microsecond), time.Microsecond)
}

// checkSemaphoreArgs rejects what no caller should pass, before anything is
// sent, so that a bad argument is never mistaken for an unreachable Redis.
func checkSemaphoreArgs(subscriptionID, holder string, limit int, ttl time.Duration) error {
	switch {
	case holder == "":
		return fmt.Errorf("%s: holder is empty", subscriptionID)
	case limit < 1:
		return fmt.Errorf("%s: limit must be at least 1, got %d", subscriptionID, limit)
	case ttl <= 0:
		return fmt.Errorf("%s: lease ttl must be positive, got %s", subscriptionID, ttl)
	}
	return nil
}
