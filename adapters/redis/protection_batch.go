package redis

import (
	"context"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/internal/batch"
)

// Limits of the group commit of Protection's script runs (see
// protectionScript).
const (
	// protectionMaxBatch is the most script runs in one pipeline: a worker
	// runs a few hundred deliveries at once, and Redis runs a pipeline's
	// scripts one after the other (some 10 µs each), so a larger batch
	// would only hold its first caller's answer back longer.
	protectionMaxBatch = 128
	// protectionWriters is how many pipelines of each script may be on
	// their way at once. One is enough: the calls that arrive while it is
	// out all go in the next, so throughput follows Redis, not the round
	// trip; a second writer measured no faster (64 goroutines, 2 cores,
	// loopback) and sent 1.7 times as many round trips, each a write and a
	// read syscall on a machine short of CPU.
	protectionWriters = 1
)

// protectionScript runs one of Protection's scripts for concurrent callers
// in shared round trips: calls that arrive while a pipeline is on its way
// gather into the next one, which carries them as one write of N EVALSHA
// and one read of N replies (group commit, see internal/batch).
//
// Each call gets its own reply or its own error, exactly as Script.Run
// would give it: a reply is per command in a pipeline, so one call's
// script error is not another's, while a lost connection fails every call
// of the pipeline, as it would have failed each of them alone. A server
// that has not seen the script answers NOSCRIPT without running it, and
// those calls are sent again as EVAL (which also caches the script for the
// next EVALSHA), Script.Run's fallback for a whole pipeline at once. A
// batch that makes one call is a plain Script.Run: no pipeline to pay for
// when there is nothing to share.
//
// A script that takes several runs (combine) carries a batch's runs of one
// group in one call, placed where the group's first run was: runs of
// different groups then run in another order than they arrived, which
// concurrent calls never promised one another.
//
// On Redis Cluster (and Ring) go-redis splits a pipeline per node by each
// command's first key, which for EVALSHA and EVAL is the first of KEYS
// (numkeys is never 0 here), and every script's keys share one {sub:<id>}
// hash tag (a group is one subscription's): each script runs on the node
// that owns its subscription, as it would alone.
type protectionScript struct {
	client  goredis.UniversalClient
	script  *goredis.Script
	timeout time.Duration
	// batcher is nil when calls are not batched (ProtectionOptions.Unbatched).
	batcher *batch.Batcher[scriptRun]
	// combine, when set, says the script takes several runs of one group
	// (one subscription with the same limits) in one call and answers one
	// reply per run: it returns the call's KEYS and ARGV for runs, in
	// order. Without it every run is a call of its own.
	combine func(runs []scriptRun) (keys []string, args []any)
}

// scriptRun is one call's run of the script in a batch.
type scriptRun struct {
	keys []string
	args []any
	// group, with combine, names the runs one call may carry together;
	// runs of one group must have the same keys. A run without one goes
	// alone.
	group string
	// reply receives the script's answer when the run succeeded; the
	// caller reads it once Commit has returned nil.
	reply *[]any
}

// newProtectionScript batches the script's runs (unless unbatched). With
// afterAnswer (Finish), a pipeline lingers for company as every stage
// after an endpoint's answer does (domain.AfterAnswerLinger): the slot
// comes back and the breaker learns the outcome that much later. Admit
// does not wait: it stands between an event and its endpoint.
func newProtectionScript(client goredis.UniversalClient, script *goredis.Script, timeout time.Duration, unbatched, afterAnswer bool) *protectionScript {
	s := &protectionScript{client: client, script: script, timeout: timeout}
	if !unbatched {
		limits := batch.Limits[scriptRun]{MaxItems: protectionMaxBatch, Writers: protectionWriters}
		if afterAnswer {
			limits.Linger, limits.Enough = domain.AfterAnswerLinger, domain.AfterAnswerEnough
		}
		s.batcher = batch.New(s.write, limits)
	}
	return s
}

// run runs the script with keys and args and returns its answer, sharing a
// round trip with concurrent calls. ctx bounds the caller's wait: when it
// ends, run returns its error at once, and the script may or may not have
// run (as with any call whose answer is lost). Errors are go-redis's, for
// the caller to interpret.
func (s *protectionScript) run(ctx context.Context, r scriptRun) ([]any, error) {
	var reply []any
	r.reply = &reply
	if s.batcher == nil {
		errs := make([]error, 1)
		s.write(ctx, []scriptRun{r}, errs)
		return reply, errs[0]
	}
	if err := s.batcher.Commit(ctx, r); err != nil {
		return nil, err
	}
	return reply, nil
}

// scriptCall is one call of the script in a batch's pipeline.
type scriptCall struct {
	keys []string
	args []any
	// runs are the indexes, in the batch, of the runs the call carries.
	runs []int
}

// calls plans the batch's pipeline: a call per run, or, with combine, a
// call per group, carrying its runs in order, placed where its first run
// was.
func (s *protectionScript) calls(runs []scriptRun) []scriptCall {
	calls := make([]scriptCall, 0, len(runs))
	// Each call's runs start as one element of idx, capped so that a
	// group's append copies rather than overwrite the next: one
	// allocation per batch, not per run.
	idx := make([]int, len(runs))
	var groups map[string]int // group → its call
	for i, r := range runs {
		idx[i] = i
		if s.combine != nil && r.group != "" {
			if c, ok := groups[r.group]; ok {
				calls[c].runs = append(calls[c].runs, i)
				continue
			}
			if groups == nil {
				groups = map[string]int{}
			}
			groups[r.group] = len(calls)
		}
		calls = append(calls, scriptCall{keys: r.keys, args: r.args, runs: idx[i : i+1 : i+1]})
	}
	if s.combine != nil {
		for c := range calls {
			group := make([]scriptRun, len(calls[c].runs))
			for j, i := range calls[c].runs {
				group[j] = runs[i]
			}
			calls[c].keys, calls[c].args = s.combine(group)
		}
	}
	return calls
}

// answer hands a call's reply, or its error, to the runs it carried. With
// combine the reply holds one reply per run, in order, and a run whose part
// is an error gets that error alone.
func (s *protectionScript) answer(c scriptCall, cmd *goredis.Cmd, runs []scriptRun, errs []error) {
	reply, err := cmd.Slice()
	if s.combine == nil {
		*runs[c.runs[0]].reply, errs[c.runs[0]] = reply, err
		return
	}
	if err == nil && len(reply) != len(c.runs) {
		err = fmt.Errorf("script answered %d replies for %d runs", len(reply), len(c.runs))
	}
	for j, i := range c.runs {
		if err != nil {
			errs[i] = err
			continue
		}
		switch part := reply[j].(type) {
		case []any:
			*runs[i].reply = part
		case error:
			errs[i] = part
		default:
			errs[i] = fmt.Errorf("script answered %v for run %d", part, j)
		}
	}
}

// write is the batch.WriteFunc: one pipeline of EVALSHA for the
// batch, then one of EVAL for the runs the server answered NOSCRIPT. ctx
// ends when every caller gave up; the batch is also bounded by the
// Timeout each call had on its own.
func (s *protectionScript) write(ctx context.Context, runs []scriptRun, errs []error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	calls := s.calls(runs)
	if len(calls) == 1 {
		s.answer(calls[0], s.script.Run(ctx, s.client, calls[0].keys, calls[0].args...), runs, errs)
		return
	}
	cmds := make([]*goredis.Cmd, len(calls))
	// Exec's error is the first failed command's; each command carries its
	// own, read below.
	_, _ = s.client.Pipelined(ctx, func(pipe goredis.Pipeliner) error {
		for i, c := range calls {
			cmds[i] = s.script.EvalSha(ctx, pipe, c.keys, c.args...)
		}
		return nil
	})
	var unknown []int
	for i, cmd := range cmds {
		if goredis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			unknown = append(unknown, i)
			continue
		}
		s.answer(calls[i], cmd, runs, errs)
	}
	if len(unknown) == 0 {
		return
	}
	_, _ = s.client.Pipelined(ctx, func(pipe goredis.Pipeliner) error {
		for _, i := range unknown {
			cmds[i] = s.script.Eval(ctx, pipe, calls[i].keys, calls[i].args...)
		}
		return nil
	})
	for _, i := range unknown {
		s.answer(calls[i], cmds[i], runs, errs)
	}
}
