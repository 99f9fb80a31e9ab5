package redis

import (
	"context"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dispatch-webhooks/dispatch/adapters/groupcommit"
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
	// finishLinger is how long a pipeline of Finish runs waits for more
	// before it goes. The endpoint has answered by then: the slot comes
	// back and the breaker learns the outcome that much later, which
	// costs a 200 ms endpoint 1 % of its max_in_flight and saves a round
	// trip per delivery under light load (see postgres.recordLinger for
	// what it measured). Admit does not wait: it stands between an event
	// and its endpoint.
	finishLinger = 2 * time.Millisecond
)

// protectionScript runs one of Protection's scripts for concurrent callers
// in shared round trips: calls that arrive while a pipeline is on its way
// gather into the next one, which carries them as one write of N EVALSHA
// and one read of N replies (group commit, see adapters/groupcommit).
//
// Each call gets its own reply or its own error, exactly as Script.Run
// would give it: a reply is per command in a pipeline, so one call's
// script error is not another's, while a lost connection fails every call
// of the pipeline, as it would have failed each of them alone. A server
// that has not seen the script answers NOSCRIPT without running it, and
// those calls are sent again as EVAL (which also caches the script for the
// next EVALSHA), Script.Run's fallback for a whole pipeline at once. A
// batch of one is a plain Script.Run: no pipeline to pay for when there is
// nothing to share.
//
// On Redis Cluster (and Ring) go-redis splits a pipeline per node by each
// command's first key, which for EVALSHA and EVAL is the first of KEYS
// (numkeys is never 0 here), and every script's keys share one {sub:<id>}
// hash tag: each script runs on the node that owns its subscription, as it
// would alone.
type protectionScript struct {
	client  goredis.UniversalClient
	script  *goredis.Script
	timeout time.Duration
	// batcher is nil when calls are not batched (ProtectionOptions.Unbatched).
	batcher *groupcommit.Batcher[scriptRun]
}

// scriptRun is one call's run of the script in a batch.
type scriptRun struct {
	keys []string
	args []any
	// reply receives the script's answer when the run succeeded; the
	// caller reads it once Commit has returned nil.
	reply *[]any
}

// newProtectionScript batches the script's runs (unless unbatched), each
// pipeline waiting linger for more runs before it goes.
func newProtectionScript(client goredis.UniversalClient, script *goredis.Script, timeout time.Duration, unbatched bool, linger time.Duration) *protectionScript {
	s := &protectionScript{client: client, script: script, timeout: timeout}
	if !unbatched {
		s.batcher = groupcommit.New(s.write, groupcommit.Limits[scriptRun]{
			MaxItems: protectionMaxBatch,
			Writers:  protectionWriters,
			Linger:   linger,
		})
	}
	return s
}

// run runs the script with keys and args and returns its answer, sharing a
// round trip with concurrent calls. ctx bounds the caller's wait: when it
// ends, run returns its error at once, and the script may or may not have
// run (as with any call whose answer is lost). Errors are go-redis's, for
// the caller to interpret.
func (s *protectionScript) run(ctx context.Context, keys []string, args []any) ([]any, error) {
	if s.batcher == nil {
		return s.script.Run(ctx, s.client, keys, args...).Slice()
	}
	var reply []any
	if err := s.batcher.Commit(ctx, scriptRun{keys: keys, args: args, reply: &reply}); err != nil {
		return nil, err
	}
	return reply, nil
}

// write is the groupcommit.WriteFunc: one pipeline of EVALSHA for the
// batch, then one of EVAL for the runs the server answered NOSCRIPT. ctx
// ends when every caller gave up; the batch is also bounded by the
// Timeout each call had on its own.
func (s *protectionScript) write(ctx context.Context, runs []scriptRun, errs []error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if len(runs) == 1 {
		*runs[0].reply, errs[0] = s.script.Run(ctx, s.client, runs[0].keys, runs[0].args...).Slice()
		return
	}
	cmds := make([]*goredis.Cmd, len(runs))
	// Exec's error is the first failed command's; each command carries its
	// own, read below.
	_, _ = s.client.Pipelined(ctx, func(pipe goredis.Pipeliner) error {
		for i, r := range runs {
			cmds[i] = s.script.EvalSha(ctx, pipe, r.keys, r.args...)
		}
		return nil
	})
	var unknown []int
	for i, cmd := range cmds {
		if goredis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			unknown = append(unknown, i)
			continue
		}
		*runs[i].reply, errs[i] = cmd.Slice()
	}
	if len(unknown) == 0 {
		return
	}
	_, _ = s.client.Pipelined(ctx, func(pipe goredis.Pipeliner) error {
		for _, i := range unknown {
			cmds[i] = s.script.Eval(ctx, pipe, runs[i].keys, runs[i].args...)
		}
		return nil
	})
	for _, i := range unknown {
		*runs[i].reply, errs[i] = cmds[i].Slice()
	}
}
