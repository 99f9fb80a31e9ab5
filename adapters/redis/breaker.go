package redis

import (
	"context"
	_ "embed"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dispatch-webhooks/dispatch/domain"
)

// BreakerStateTTL is how long a breaker's key outlives its last change (or,
// while open, the end of its open period), so subscriptions that stopped
// receiving deliveries do not keep keys forever. A breaker that expires
// reads as closed, which after a day without a change (no attempt finished,
// no probe started) is the right state anyway.
const BreakerStateTTL = 24 * time.Hour

//go:embed breaker_swap.lua
var breakerSwapLua string

// breakerSwap runs by EVALSHA, falling back to EVAL the first time a
// server has not seen it.
var breakerSwap = goredis.NewScript(breakerSwapLua)

// breakerMaxAttempts bounds the compare-and-set rounds one call makes.
// Every round that conflicts has a winner, so n callers racing on one
// breaker finish within n rounds, and the race is short-lived: once the
// breaker is open (or its probes are all out) further results change
// nothing and need no transaction. The jittered backoff between rounds
// spreads a crowd out so 100 is far more than needed.
const breakerMaxAttempts = 100

// breakerStore keeps Protection's breakers: each subscription's
// domain.Breaker in one string key, "<prefix>{sub:<id>}:breaker", updated optimistically:
// GET, compute the transition, then a compare-and-set script that writes
// only if nobody changed the key meanwhile (retried from the value it
// answers with on conflict; Protection's scripts do the GET).
// The transitions are domain.Breaker's, computed here in Go; Redis only
// stores the result. A closed breaker with no failures is no key at all,
// and a call that leaves the state unchanged (the hot path: a closed
// breaker allowing, or recording a success) costs one GET and no write; a
// change costs a GET and one EVALSHA.
// Safe for concurrent use.
type breakerStore struct {
	client goredis.UniversalClient
}

// newBreakerStore returns a breakerStore on client.
func newBreakerStore(client goredis.UniversalClient) *breakerStore {
	return &breakerStore{client: client}
}

// updateFrom applies transition to stored, the value last read from key
// ("" for no key), and stores the result with a compare-and-set script
// (breaker_swap.lua) that writes only if the key still holds stored. When
// another caller changed it in between, the script answers with the
// current value and the transition runs again from it, until a write goes
// through or nothing changes. transition may run several times; the caller
// keeps what its last run decided.
func (b *breakerStore) updateFrom(ctx context.Context, key, stored string, now time.Time, transition func(domain.Breaker) domain.Breaker) (domain.Breaker, error) {
	for attempt := range breakerMaxAttempts {
		next := transition(decodeBreaker(stored))
		encoded := encodeBreaker(next)
		if encoded == stored {
			return next, nil
		}
		ttl := breakerTTL(next, now)
		res, err := breakerSwap.Run(ctx, b.client, []string{key}, stored, encoded, max(ttl.Milliseconds(), 1)).Slice()
		if err != nil {
			return domain.Breaker{}, interpretError(err)
		}
		swapped, current, err := swapResult(res)
		if err != nil {
			return domain.Breaker{}, err
		}
		if swapped {
			return next, nil
		}
		stored = current
		if attempt > 0 {
			// Conflicts again: wait a little, longer each round, so a
			// crowd of callers spreads out instead of colliding again.
			if err := sleepCtx(ctx, rand.N(time.Duration(min(attempt, 20))*250*time.Microsecond)); err != nil {
				return domain.Breaker{}, err
			}
		}
	}
	return domain.Breaker{}, fmt.Errorf("%s changed by other workers %d times in a row", key, breakerMaxAttempts)
}

// swapResult reads breaker_swap.lua's answer.
func swapResult(res []any) (swapped bool, current string, err error) {
	if len(res) != 2 {
		return false, "", fmt.Errorf("breaker swap script answered %v", res)
	}
	ok, _ := res[0].(int64)
	current, isString := res[1].(string)
	if !isString {
		return false, "", fmt.Errorf("breaker swap script answered %v", res)
	}
	return ok == 1, current, nil
}

// breakerTTL keeps an open breaker's key at least until its open period
// ends, then BreakerStateTTL more.
func breakerTTL(s domain.Breaker, now time.Time) time.Duration {
	return BreakerStateTTL + max(s.OpenUntil.Sub(now), 0)
}

// encodeBreaker serializes s compactly as "<phase>:<failures>:<open until,
// Unix ns>:<probes started>", the phase one letter (c, o, h). The zero
// Breaker, closed with no failures, encodes as "": no key is stored for it.
// Nanoseconds keep OpenUntil exact, so Allow decides at exactly the instant
// the domain computed.
func encodeBreaker(s domain.Breaker) string {
	phase := "c"
	switch s.Phase {
	case domain.BreakerOpen:
		phase = "o"
	case domain.BreakerHalfOpen:
		phase = "h"
	}
	if phase == "c" && s.Failures == 0 && s.OpenUntil.IsZero() && s.ProbesStarted == 0 {
		return ""
	}
	var until int64
	if !s.OpenUntil.IsZero() {
		until = s.OpenUntil.UnixNano()
	}
	return phase + ":" + strconv.Itoa(s.Failures) + ":" + strconv.FormatInt(until, 10) + ":" + strconv.Itoa(s.ProbesStarted)
}

// decodeBreaker reads what encodeBreaker wrote. Like domain.Breaker reads an
// unknown phase, a value it cannot parse reads as closed: a corrupted key
// must not stop a subscription's deliveries for good (and the next change
// overwrites it).
func decodeBreaker(v string) domain.Breaker {
	fields := strings.Split(v, ":")
	if len(fields) != 4 {
		return domain.Breaker{}
	}
	var s domain.Breaker
	switch fields[0] {
	case "o":
		s.Phase = domain.BreakerOpen
	case "h":
		s.Phase = domain.BreakerHalfOpen
	case "c":
		s.Phase = domain.BreakerClosed
	default:
		return domain.Breaker{}
	}
	failures, err1 := strconv.Atoi(fields[1])
	until, err2 := strconv.ParseInt(fields[2], 10, 64)
	probes, err3 := strconv.Atoi(fields[3])
	if err1 != nil || err2 != nil || err3 != nil {
		return domain.Breaker{}
	}
	s.Failures, s.ProbesStarted = failures, probes
	if until != 0 {
		s.OpenUntil = time.Unix(0, until).UTC()
	}
	return s
}

// sleepCtx waits d, or less if ctx ends first.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// checkedPrefix returns prefix, or DefaultPrefix for "", and panics on what
// only a programming error can pass: a nil client, or a prefix that would
// break the hash tag after it.
func checkedPrefix(what string, client goredis.UniversalClient, prefix string) string {
	if client == nil {
		panic("redis " + what + ": client is nil")
	}
	if strings.ContainsAny(prefix, "{}") {
		panic(fmt.Sprintf("redis %s: prefix must not contain '{' or '}', got %q", what, prefix))
	}
	if prefix == "" {
		return DefaultPrefix
	}
	return prefix
}
