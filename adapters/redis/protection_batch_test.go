package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatch-webhooks/dispatch/adapters/redis/redistest"
	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
	"github.com/dispatch-webhooks/dispatch/ports/protectiontest"
)

// scriptTrips is a go-redis hook that counts the round trips (a single
// command or a whole pipeline) that run a given script. While a gate is
// armed, each such round trip waits at the gate until it opens (see arm).
type scriptTrips struct {
	script *goredis.Script
	trips  atomic.Int64

	mu   sync.Mutex
	gate *tripGate
}

// tripGate holds round trips back until every one of total calls is either
// queued in the batcher or in a held round trip, so a test can line
// concurrent calls up without sleeping.
type tripGate struct {
	total   int
	waiting func() int
	held    atomic.Int64
	open    chan struct{}
	once    sync.Once
	// failed is set when the calls never lined up.
	failed atomic.Bool
}

func (s *scriptTrips) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (s *scriptTrips) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if s.runs(cmd) {
			s.trip(runsIn(cmd))
		}
		return next(ctx, cmd)
	}
}

func (s *scriptTrips) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		n := 0
		for _, cmd := range cmds {
			if s.runs(cmd) {
				n += runsIn(cmd)
			}
		}
		if n > 0 {
			s.trip(n)
		}
		return next(ctx, cmds)
	}
}

// runs reports whether cmd runs the script (EVALSHA by its hash, or EVAL).
func (s *scriptTrips) runs(cmd goredis.Cmder) bool {
	args := cmd.Args()
	if len(args) < 2 {
		return false
	}
	switch strings.ToLower(cmd.Name()) {
	case "evalsha":
		return args[1] == s.script.Hash()
	case "eval":
		return args[1] == protectionAdmitLua && s.script == protectionAdmit ||
			args[1] == protectionFinishLua && s.script == protectionFinish
	}
	return false
}

// runsIn is how many calls' runs a command of the scripts carries: its
// group's (an admission takes four shared arguments and three per run, a
// finish two per run), the others one each.
func runsIn(cmd goredis.Cmder) int {
	args := cmd.Args()
	numKeys, _ := args[2].(int)
	switch args[1] {
	case protectionAdmit.Hash(), protectionAdmitLua:
		return (len(args) - 3 - numKeys - 4) / 3
	case protectionFinish.Hash(), protectionFinishLua:
		return (len(args) - 3 - numKeys) / 2
	}
	return 1
}

// trip counts a round trip carrying n runs, and holds it at the gate if
// one is armed.
func (s *scriptTrips) trip(n int) {
	s.trips.Add(1)
	s.mu.Lock()
	g := s.gate
	s.mu.Unlock()
	if g == nil {
		return
	}
	g.held.Add(int64(n))
	deadline := time.Now().Add(waitFor)
	for {
		select {
		case <-g.open:
			return
		default:
		}
		if g.waiting()+int(g.held.Load()) >= g.total {
			g.once.Do(func() { close(g.open) })
			return
		}
		if time.Now().After(deadline) {
			g.failed.Store(true)
			g.once.Do(func() { close(g.open) })
			return
		}
		time.Sleep(100 * time.Microsecond) // polling the batcher's queue
	}
}

// arm holds the script's round trips until total calls are lined up in b
// (queued or in a held round trip), and resets the count.
func (s *scriptTrips) arm(b *protectionScript, total int) *tripGate {
	g := &tripGate{total: total, waiting: b.batcher.Waiting, open: make(chan struct{})}
	s.mu.Lock()
	s.gate = g
	s.mu.Unlock()
	s.trips.Store(0)
	return g
}

// disarm removes the gate and reports whether the calls lined up.
func (s *scriptTrips) disarm(t *testing.T, g *tripGate) {
	t.Helper()
	s.mu.Lock()
	s.gate = nil
	s.mu.Unlock()
	require.False(t, g.failed.Load(), "waited %s for %d calls to line up in the batcher", waitFor, g.total)
}

// TestProtectionBatchesConcurrentCalls has 100 deliveries call Admit at
// once, then the admitted ones Finish at once, on four subscriptions
// refused for different reasons: they share a handful of round trips, and
// each caller gets the answer it would have got alone.
func TestProtectionBatchesConcurrentCalls(t *testing.T) {
	t.Parallel()
	_, client := newMiniClock(t) // frozen: the rate limit refuses exactly
	admits, finishes := &scriptTrips{script: protectionAdmit}, &scriptTrips{script: protectionFinish}
	client.AddHook(admits)
	client.AddHook(finishes)
	p := NewProtection(client, "", ProtectionOptions{})
	ctx := t.Context()
	cfg := domain.BreakerConfig{FailureThreshold: 5, OpenDuration: time.Minute, HalfOpenProbes: 1}
	now := time.Now()
	for _, s := range []*goredis.Script{protectionAdmit, protectionFinish, breakerSwap} {
		require.NoError(t, s.Load(ctx, client).Err())
	}
	opened := openBreaker(t, p, "open", cfg, now)
	admits.trips.Store(0)
	finishes.trips.Store(0)

	// 25 deliveries each to: a subscription whose breaker is open; one with
	// 5 slots; one with a budget of 1 request (10/s, frozen clock); one
	// that lets everything through.
	type plan struct {
		perSecond, slots int
	}
	plans := map[string]plan{
		"open": {domain.MaxRateLimit, 100}, "full": {domain.MaxRateLimit, 5}, "slow": {10, 100}, "ok": {domain.MaxRateLimit, 100},
	}
	subs := []string{"open", "full", "slow", "ok"}
	const n = 100
	reqs := make([]ports.Admission, n)
	for i := range reqs {
		sub := subs[i%len(subs)]
		reqs[i] = ports.Admission{
			SubscriptionID: sub, Holder: fmt.Sprint("h", i), Breaker: cfg, Now: now,
			PerSecond: plans[sub].perSecond, MaxInFlight: plans[sub].slots, Lease: time.Minute,
		}
	}

	gate := admits.arm(p.admitScript, n)
	results := make([]ports.Admitted, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range reqs {
		wg.Go(func() { results[i], errs[i] = p.Admit(ctx, reqs[i]) })
	}
	wg.Wait()
	admits.disarm(t, gate)
	// The first protectionWriters callers lead a batch each at once; when
	// they are done, everyone else is queued and goes in at most one batch
	// per writer.
	trips := admits.trips.Load()
	assert.LessOrEqual(t, trips, int64(2*protectionWriters), "100 concurrent Admits share round trips")
	t.Logf("100 concurrent Admits: %d round trips", trips)

	admitted := map[string]int{}
	for i, res := range results {
		require.NoError(t, errs[i], "Admit %d", i)
		sub := reqs[i].SubscriptionID
		switch {
		case res.Refused == ports.RefusedByNone:
			admitted[sub]++
		case sub == "open":
			assert.Equal(t, ports.RefusedByBreaker, res.Refused, "%s: %+v", reqs[i].Holder, res)
			assert.True(t, res.RetryAt.Equal(opened.OpenUntil), "%s: retry at %s, want %s", reqs[i].Holder, res.RetryAt, opened.OpenUntil)
		case sub == "full":
			assert.Equal(t, ports.RefusedBySemaphore, res.Refused, "%s: %+v", reqs[i].Holder, res)
		case sub == "slow":
			assert.Equal(t, ports.RefusedByRateLimit, res.Refused, "%s: %+v", reqs[i].Holder, res)
			assert.Positive(t, res.RetryAfter, "%s: a rate refusal says when to come back", reqs[i].Holder)
		default:
			t.Errorf("%s to %s refused: %+v", reqs[i].Holder, sub, res)
		}
	}
	assert.Equal(t, map[string]int{"full": 5, "slow": RateBurst(10), "ok": 25}, admitted)

	// Finish the admitted: "full" fails all five (the fifth opens its
	// breaker, each through the compare-and-set after the batched script),
	// the others succeed.
	var done []int
	for i, res := range results {
		if res.Refused == ports.RefusedByNone {
			done = append(done, i)
		}
	}
	gate = finishes.arm(p.finishScript, len(done))
	states := make([]domain.Breaker, n)
	for _, i := range done {
		wg.Go(func() {
			states[i], errs[i] = p.Finish(ctx, reqs[i].SubscriptionID, reqs[i].Holder, cfg, reqs[i].SubscriptionID != "full", now)
		})
	}
	wg.Wait()
	finishes.disarm(t, gate)
	trips = finishes.trips.Load()
	assert.LessOrEqual(t, trips, int64(2*protectionWriters), "%d concurrent Finishes share round trips", len(done))
	t.Logf("%d concurrent Finishes: %d round trips", len(done), trips)

	var failures []int
	for _, i := range done {
		require.NoError(t, errs[i], "Finish %s", reqs[i].Holder)
		if reqs[i].SubscriptionID == "full" {
			failures = append(failures, states[i].Failures)
			if states[i].Failures == cfg.FailureThreshold {
				assert.Equal(t, domain.BreakerOpen, states[i].Phase, "the fifth failure opens the breaker")
			}
			continue
		}
		assert.Equal(t, domain.Breaker{Phase: domain.BreakerClosed}, states[i], "a success on a closed breaker")
	}
	assert.ElementsMatch(t, []int{1, 2, 3, 4, 5}, failures, "each failure counted once, each caller sees its own")
	for _, sub := range subs {
		_, _, inflight := p.keys(sub)
		held, err := client.ZCard(ctx, inflight).Result()
		require.NoError(t, err)
		assert.Zero(t, held, "%s: every slot given back", sub)
	}
}

// TestProtectionScriptBatchNoScript writes a batch straight to a Redis
// that has never seen the script: the EVALSHA pipeline is answered
// NOSCRIPT, the same runs go again as EVAL, and each gets its own answer,
// a bad one its own error.
func TestProtectionScriptBatchNoScript(t *testing.T) {
	t.Parallel()
	_, client := redistest.Mini(t)
	trips := &scriptTrips{script: protectionFinish}
	client.AddHook(trips)
	p := NewProtection(client, "", ProtectionOptions{})
	ctx := t.Context()
	require.NoError(t, client.ScriptFlush(ctx).Err())
	held, err := p.Admit(ctx, ports.Admission{
		SubscriptionID: "s", Holder: "held", Breaker: domain.DefaultBreakerConfig(), Now: time.Now(),
		PerSecond: 10, MaxInFlight: 1, Lease: time.Minute,
	})
	require.NoError(t, err)
	require.Equal(t, ports.RefusedByNone, held.Refused)
	require.NoError(t, client.ScriptFlush(ctx).Err())

	breakerKey, _, inflightKey := p.keys("s")
	replies := make([][]any, 3)
	runs := []scriptRun{
		{keys: []string{inflightKey, breakerKey}, args: []any{"held", "1"}, reply: &replies[0]},
		{keys: []string{inflightKey}, args: []any{"no-breaker-key", "1"}, reply: &replies[1]}, // KEYS[2] is nil: the script fails
		{keys: []string{inflightKey, breakerKey}, args: []any{"never-held", "0"}, reply: &replies[2]},
	}
	errs := make([]error, len(runs))
	p.finishScript.write(ctx, runs, errs)

	assert.Equal(t, int64(2), trips.trips.Load(), "an EVALSHA pipeline, then an EVAL one")
	require.NoError(t, errs[0])
	assert.Equal(t, []any{int64(1)}, replies[0], "a success on a closed breaker")
	assert.Error(t, errs[1], "the bad run fails on its own")
	require.NoError(t, errs[2])
	assert.Equal(t, []any{int64(0), ""}, replies[2], "a failure hands the breaker back to Go")
	n, err := client.ZCard(ctx, inflightKey).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "the first run released its slot")

	sha, err := client.ScriptExists(ctx, protectionFinish.Hash()).Result()
	require.NoError(t, err)
	assert.Equal(t, []bool{true}, sha, "EVAL cached the script for the next batch")
}

// TestProtectionUnbatched checks that Unbatched runs each call on its own,
// as Script.Run.
func TestProtectionUnbatched(t *testing.T) {
	t.Parallel()
	_, client := redistest.Mini(t)
	p := NewProtection(client, "", ProtectionOptions{Unbatched: true})
	assert.Nil(t, p.admitScript.batcher)
	assert.Nil(t, p.finishScript.batcher)
	res, err := p.Admit(t.Context(), ports.Admission{
		SubscriptionID: "s", Holder: "h", Breaker: domain.DefaultBreakerConfig(), Now: time.Now(),
		PerSecond: 10, MaxInFlight: 1, Lease: time.Minute,
	})
	require.NoError(t, err)
	assert.Equal(t, ports.RefusedByNone, res.Refused)
}

// TestProtectionClusterClient runs the contract suite and the batching
// through a ClusterClient (miniredis answers CLUSTER SLOTS as one node
// with every slot): go-redis splits a pipeline per node by each command's
// first key, which for EVALSHA is the first of KEYS.
func TestProtectionClusterClient(t *testing.T) {
	newCluster := func(t *testing.T) goredis.UniversalClient {
		_, single := redistest.Mini(t)
		addr := single.(*goredis.Client).Options().Addr
		client := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: []string{addr}})
		t.Cleanup(func() { _ = client.Close() })
		return client
	}
	protectiontest.RunProtection(t, func(t *testing.T) ports.Protection {
		return protectionSet(newCluster(t), "")
	}, protectiontest.Features{RateBurst: RateBurst})

	t.Run("Batched", func(t *testing.T) {
		t.Parallel()
		client := newCluster(t)
		trips := &scriptTrips{script: protectionAdmit}
		client.AddHook(trips)
		p := NewProtection(client, "", ProtectionOptions{})
		const n = 50
		gate := trips.arm(p.admitScript, n)
		errs := make([]error, n)
		results := make([]ports.Admitted, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				results[i], errs[i] = p.Admit(t.Context(), ports.Admission{
					SubscriptionID: fmt.Sprint("s", i%7), Holder: fmt.Sprint("h", i), Breaker: domain.DefaultBreakerConfig(),
					Now: time.Now(), PerSecond: domain.MaxRateLimit, MaxInFlight: 100, Lease: time.Minute,
				})
			})
		}
		wg.Wait()
		trips.disarm(t, gate)
		for i := range n {
			require.NoError(t, errs[i])
			assert.Equal(t, ports.RefusedByNone, results[i].Refused)
		}
		assert.Less(t, trips.trips.Load(), int64(n/2), "concurrent Admits share round trips on a cluster client too")
	})
}

// TestAdmitManyMatchesSingleRuns writes one batch of Admit runs, most of
// them sharing calls of protection_admit.lua, to one Redis, and the same
// runs one by one, a call each, to another at the same frozen instant:
// every run gets the same answer, and both Redis servers end with the same
// rate-limit, lease and expiry state. The runs cover each answer:
// admitted, refused by the rate limit, by a full semaphore, a holder
// taking its slot again, and an open breaker, passed or not.
func TestAdmitManyMatchesSingleRuns(t *testing.T) {
	t.Parallel()
	at := time.Now().Truncate(time.Millisecond)
	mrBatch, batched := redistest.Mini(t)
	mrAlone, alone := redistest.Mini(t)
	for _, mr := range []*miniredis.Miniredis{mrBatch, mrAlone} {
		mr.SetTime(at)
		mr.ClockTTL(true)
	}
	ctx := t.Context()
	p, pAlone := NewProtection(batched, "", ProtectionOptions{}), NewProtection(alone, "", ProtectionOptions{})
	opened := encodeBreaker(domain.Breaker{Phase: domain.BreakerOpen, OpenUntil: at.Add(time.Minute)})
	for _, c := range []goredis.UniversalClient{batched, alone} {
		breaker, _, _ := p.keys("open")
		require.NoError(t, c.Set(ctx, breaker, opened, 0).Err())
	}

	type admit struct {
		sub              string
		holder           string
		perSecond, slots int
		lease            time.Duration
		passed           bool
	}
	admits := []admit{
		{"a", "h1", 50, 3, time.Minute, false}, // a burst of 5 requests, 3 slots
		{"b", "h1", 100, 1, time.Second, false},
		{"a", "h2", 50, 3, 2 * time.Minute, false},
		{"a", "h1", 50, 3, time.Minute, false},  // h1 again: its own slot
		{"b", "h2", 100, 1, time.Second, false}, // b's one slot is h1's
		{"a", "h3", 50, 3, time.Minute, false},  // a's last slot
		{"open", "h1", 100, 5, time.Minute, false},
		{"open", "h2", 100, 5, 3 * time.Minute, true}, // past the breaker in Go
		{"c", "h1", 100, 2, time.Minute, false},       // a group of one
		{"a", "h4", 50, 3, time.Minute, false},        // the 5th request: no slot left, or at the burst's edge
		{"a", "h5", 60, 3, time.Minute, false},        // a's other limits: a group of its own
		{"open", "h3", 100, 5, time.Minute, false},
		{"a", "h6", 50, 3, time.Minute, false}, // the burst is spent
		{"b", "h3", 100, 1, time.Second, false},
	}
	runs := make([]scriptRun, len(admits))
	replies := make([][]any, len(admits))
	for i, a := range admits {
		breaker, rate, inflight := p.keys(a.sub)
		passed := "0"
		if a.passed {
			passed = "1"
		}
		runs[i] = scriptRun{
			keys:  []string{breaker, rate, inflight},
			args:  []any{RateBurst(a.perSecond), a.perSecond, 1, a.holder, a.slots, a.lease.Milliseconds(), passed},
			group: admitGroup(breaker, a.perSecond, a.slots),
			reply: &replies[i],
		}
	}
	calls := p.admitScript.calls(runs)
	assert.Len(t, calls, 5, "a's, b's and open's runs share a call each; c's and a's other limits go alone")

	trips := &scriptTrips{script: protectionAdmit}
	batched.AddHook(trips)
	errs := make([]error, len(runs))
	p.admitScript.write(ctx, runs, errs)
	assert.Equal(t, int64(2), trips.trips.Load(), "an EVALSHA pipeline, then an EVAL one (the script was never loaded)")

	answersAsAlone(t, pAlone.admitScript, runs, replies, errs, func(i int) string { return admits[i].sub + " " + admits[i].holder })
	for _, i := range []int{0, 2, 3, 5, 7, 8} {
		assert.Equal(t, []any{int64(1)}, replies[i], "run %d (%s %s) admitted", i, admits[i].sub, admits[i].holder)
	}
	assert.Equal(t, []any{int64(3)}, replies[4], "b's one slot is taken")
	assert.Equal(t, []any{int64(0), opened}, replies[6], "the open breaker goes back to Go")
	assert.Equal(t, int64(2), replies[12][0], "a's burst is spent")
	for _, sub := range []string{"a", "b", "c", "open"} {
		_, rate, inflight := p.keys(sub)
		sameKeys(t, alone, batched, rate, inflight)
	}
}

// answersAsAlone runs each of runs in a batch of its own, in order, with
// script (on another server than the batch ran on) and checks that it
// answers what the batch's run answered (replies, errs); name names run i.
func answersAsAlone(t *testing.T, script *protectionScript, runs []scriptRun, replies [][]any, errs []error, name func(i int) string) {
	t.Helper()
	for i, r := range runs {
		require.NoError(t, errs[i], "run %d", i)
		var want []any
		r.reply = &want
		aloneErrs := make([]error, 1)
		script.write(t.Context(), []scriptRun{r}, aloneErrs)
		require.NoError(t, aloneErrs[0], "run %d alone", i)
		assert.Equal(t, want, replies[i], "run %d (%s)", i, name(i))
	}
}

// sameKeys checks that keys hold the same on both servers (dumpKey).
func sameKeys(t *testing.T, want, got goredis.UniversalClient, keys ...string) {
	t.Helper()
	for _, key := range keys {
		wantDump, err := dumpKey(t.Context(), want, key)
		require.NoError(t, err)
		gotDump, err := dumpKey(t.Context(), got, key)
		require.NoError(t, err)
		assert.Equal(t, wantDump, gotDump, "%s", key)
	}
}

// dumpKey is a key's value (a string, or a sorted set's members with their
// scores) and its time to live, for comparing two servers' state.
func dumpKey(ctx context.Context, c goredis.UniversalClient, key string) (string, error) {
	ttl, err := c.PTTL(ctx, key).Result()
	if err != nil {
		return "", err
	}
	kind, err := c.Type(ctx, key).Result()
	if err != nil {
		return "", err
	}
	switch kind {
	case "string":
		v, err := c.Get(ctx, key).Result()
		return fmt.Sprintf("%s %v ttl %s", kind, v, ttl), err
	case "zset":
		v, err := c.ZRangeWithScores(ctx, key, 0, -1).Result()
		return fmt.Sprintf("%s %v ttl %s", kind, v, ttl), err
	}
	return fmt.Sprintf("%s ttl %s", kind, ttl), nil
}

// TestAdmitManyFailsOnlyItsGroup has a batch whose shared call for one
// subscription fails as a whole (its lease key holds a string, so ZADD is
// refused): each of that group's runs gets the error, and the runs of the
// other subscription, sharing the same pipeline, are admitted.
func TestAdmitManyFailsOnlyItsGroup(t *testing.T) {
	t.Parallel()
	_, client := redistest.Mini(t)
	ctx := t.Context()
	p := NewProtection(client, "", ProtectionOptions{})
	_, _, broken := p.keys("broken")
	require.NoError(t, client.Set(ctx, broken, "not a sorted set", 0).Err())

	var runs []scriptRun
	replies := make([][]any, 4)
	for i, sub := range []string{"broken", "ok", "broken", "ok"} {
		breaker, rate, inflight := p.keys(sub)
		runs = append(runs, scriptRun{
			keys:  []string{breaker, rate, inflight},
			args:  []any{RateBurst(100), 100, 1, fmt.Sprint("h", i), 10, 60000, "0"},
			group: admitGroup(breaker, 100, 10),
			reply: &replies[i],
		})
	}
	errs := make([]error, len(runs))
	p.admitScript.write(ctx, runs, errs)
	for _, i := range []int{0, 2} {
		assert.ErrorContains(t, errs[i], "WRONGTYPE", "run %d of the broken group", i)
	}
	for _, i := range []int{1, 3} {
		require.NoError(t, errs[i], "run %d", i)
		assert.Equal(t, []any{int64(1)}, replies[i], "run %d admitted", i)
	}
}

// TestAnswerSharedReplies drives how a combined call's reply is handed to
// its runs, including the replies protection_admit.lua never gives: a part
// that is an error fails its run alone, and a reply of the wrong length or
// a part that is not a reply fails the runs it cannot be matched to.
func TestAnswerSharedReplies(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := &protectionScript{combine: admitCall}
	call := scriptCall{runs: []int{0, 1, 2}}
	newRuns := func() ([]scriptRun, [][]any, []error) {
		replies := make([][]any, 3)
		runs := make([]scriptRun, 3)
		for i := range runs {
			runs[i].reply = &replies[i]
		}
		return runs, replies, make([]error, 3)
	}

	cmd := goredis.NewCmd(ctx)
	cmd.SetVal([]any{[]any{int64(1)}, goredis.Nil, "x"})
	runs, replies, errs := newRuns()
	s.answer(call, cmd, runs, errs)
	require.NoError(t, errs[0])
	assert.Equal(t, []any{int64(1)}, replies[0])
	assert.ErrorIs(t, errs[1], goredis.Nil, "a part that is an error fails its run")
	assert.ErrorContains(t, errs[2], "script answered x for run 2")

	cmd = goredis.NewCmd(ctx)
	cmd.SetVal([]any{[]any{int64(1)}})
	runs, _, errs = newRuns()
	s.answer(call, cmd, runs, errs)
	for i := range errs {
		assert.ErrorContains(t, errs[i], "script answered 1 replies for 3 runs", "run %d", i)
	}

	cmd = goredis.NewCmd(ctx)
	cmd.SetErr(errors.New("connection reset"))
	runs, _, errs = newRuns()
	s.answer(call, cmd, runs, errs)
	for i := range errs {
		assert.ErrorContains(t, errs[i], "connection reset", "run %d", i)
	}
}

// TestFinishManyMatchesSingleRuns finishes a batch of requests to three
// subscriptions (a closed breaker with failures, none, an open one) in one
// call per subscription, and the same requests alone one after the other
// on another server: each run gets the reply it got alone, and the leases
// and breakers end alike.
func TestFinishManyMatchesSingleRuns(t *testing.T) {
	t.Parallel()
	_, batched := redistest.Mini(t)
	_, alone := redistest.Mini(t)
	ctx := t.Context()
	p, pAlone := NewProtection(batched, "", ProtectionOptions{}), NewProtection(alone, "", ProtectionOptions{})
	failing := encodeBreaker(domain.Breaker{Phase: domain.BreakerClosed, Failures: 2})
	opened := encodeBreaker(domain.Breaker{Phase: domain.BreakerOpen, OpenUntil: time.Now().Add(time.Minute)})
	for _, c := range []goredis.UniversalClient{batched, alone} {
		for sub, stored := range map[string]string{"failing": failing, "open": opened} {
			breaker, _, _ := p.keys(sub)
			require.NoError(t, c.Set(ctx, breaker, stored, 0).Err())
		}
		for _, sub := range []string{"failing", "none", "open"} {
			_, _, inflight := p.keys(sub)
			for _, h := range []string{"h1", "h2", "h3"} {
				require.NoError(t, c.ZAdd(ctx, inflight, goredis.Z{Score: 1e15, Member: h}).Err())
			}
		}
	}

	type finish struct {
		sub, holder string
		success     bool
	}
	finishes := []finish{
		{"failing", "h1", false}, // the breaker goes back to Go, as stored
		{"none", "h1", true},
		{"failing", "h2", true},  // a success resets the closed breaker
		{"open", "h1", true},     // an open breaker's transition is Go's
		{"failing", "h3", false}, // after the reset: no breaker stored
		{"none", "h2", false},
		{"open", "h2", false},
		{"none", "h3", true},
	}
	runs := make([]scriptRun, len(finishes))
	replies := make([][]any, len(finishes))
	for i, f := range finishes {
		breaker, _, inflight := p.keys(f.sub)
		ok := "0"
		if f.success {
			ok = "1"
		}
		runs[i] = scriptRun{keys: []string{inflight, breaker}, args: []any{f.holder, ok}, group: breaker, reply: &replies[i]}
	}
	assert.Len(t, p.finishScript.calls(runs), 3, "one call per subscription")
	errs := make([]error, len(runs))
	p.finishScript.write(ctx, runs, errs)

	answersAsAlone(t, pAlone.finishScript, runs, replies, errs, func(i int) string { return finishes[i].sub + " " + finishes[i].holder })
	assert.Equal(t, []any{int64(0), failing}, replies[0])
	assert.Equal(t, []any{int64(1)}, replies[2])
	assert.Equal(t, []any{int64(0), ""}, replies[4], "the success before reset the breaker")
	assert.Equal(t, []any{int64(0), opened}, replies[3])
	for _, sub := range []string{"failing", "none", "open"} {
		breaker, _, inflight := p.keys(sub)
		sameKeys(t, alone, batched, breaker, inflight)
	}
}

// admitRun is a Protection's Admit run of holder to sub, answering into
// reply.
func admitRun(p *Protection, sub, holder string, perSecond, slots int, lease time.Duration, reply *[]any) scriptRun {
	breaker, rate, inflight := p.keys(sub)
	return scriptRun{
		keys:  []string{breaker, rate, inflight},
		args:  []any{RateBurst(perSecond), perSecond, 1, holder, slots, lease.Milliseconds(), "0"},
		group: admitGroup(breaker, perSecond, slots),
		reply: reply,
	}
}

// TestAdmitSweepsExpiredLeasesOnlyWhenFull: a lease whose holder died
// stays in the set while the set has room for the requests without it,
// and is swept, its slot given to a request, once it has not.
func TestAdmitSweepsExpiredLeasesOnlyWhenFull(t *testing.T) {
	t.Parallel()
	at := time.Now().Truncate(time.Millisecond)
	mr, client := redistest.Mini(t)
	mr.SetTime(at)
	ctx := t.Context()
	p := NewProtection(client, "", ProtectionOptions{})
	_, _, inflight := p.keys("s")
	require.NoError(t, client.ZAdd(ctx, inflight, goredis.Z{Score: float64(at.Add(-time.Second).UnixMilli()), Member: "dead"}).Err())

	admit := func(holder string) []any {
		t.Helper()
		var reply []any
		errs := make([]error, 1)
		p.admitScript.write(ctx, []scriptRun{admitRun(p, "s", holder, 100, 2, time.Minute, &reply)}, errs)
		require.NoError(t, errs[0], holder)
		return reply
	}
	assert.Equal(t, []any{int64(1)}, admit("h1"))
	members, err := client.ZRange(ctx, inflight, 0, -1).Result()
	require.NoError(t, err)
	assert.Equal(t, []string{"dead", "h1"}, members, "room for h1 beside the expired lease: not swept")

	assert.Equal(t, []any{int64(1)}, admit("h2"), "the expired lease's slot")
	members, err = client.ZRange(ctx, inflight, 0, -1).Result()
	require.NoError(t, err)
	assert.Equal(t, []string{"h1", "h2"}, members, "full: swept")
	assert.Equal(t, []any{int64(3)}, admit("h3"), "two live leases of two")
}

// TestProtectionScriptsTakeLargeBatches sends 8,200 Admits to one
// subscription in one call of protection_admit.lua, then their 8,200
// Finishes in one call of protection_finish.lua, on real Redis: more
// leases than one ZADD or ZREM of the scripts carries (unpack's results
// must fit Lua's stack), so both split them, and every one is taken and
// given back.
func TestProtectionScriptsTakeLargeBatches(t *testing.T) {
	t.Parallel()
	client, prefix := redistest.Client(t), redistest.Prefix(t)
	t.Cleanup(func() { _ = redistest.DeleteKeys(context.Background(), client, "rate:"+prefix) })
	ctx := t.Context()
	p := NewProtection(client, prefix, ProtectionOptions{})
	const n = 8200
	admits := make([]scriptRun, n)
	admitReplies := make([][]any, n)
	for i := range admits {
		admits[i] = admitRun(p, "s", fmt.Sprint("h", i), 1000000, 10000, time.Minute, &admitReplies[i])
	}
	require.Len(t, p.admitScript.calls(admits), 1)
	errs := make([]error, n)
	p.admitScript.write(ctx, admits, errs)
	for i := range admits {
		require.NoError(t, errs[i], "admit %d", i)
		require.Equal(t, []any{int64(1)}, admitReplies[i], "admit %d", i)
	}
	_, _, inflight := p.keys("s")
	count, err := client.ZCard(ctx, inflight).Result()
	require.NoError(t, err)
	assert.Equal(t, int64(n), count)

	breaker, _, _ := p.keys("s")
	finishes := make([]scriptRun, n)
	finishReplies := make([][]any, n)
	for i := range finishes {
		finishes[i] = scriptRun{keys: []string{inflight, breaker}, args: []any{fmt.Sprint("h", i), "1"}, group: breaker, reply: &finishReplies[i]}
	}
	require.Len(t, p.finishScript.calls(finishes), 1)
	errs = make([]error, n)
	p.finishScript.write(ctx, finishes, errs)
	for i := range finishes {
		require.NoError(t, errs[i], "finish %d", i)
		require.Equal(t, []any{int64(1)}, finishReplies[i], "finish %d", i)
	}
	count, err = client.ZCard(ctx, inflight).Result()
	require.NoError(t, err)
	assert.Zero(t, count, "every slot given back")
}
