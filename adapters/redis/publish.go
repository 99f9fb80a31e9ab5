package redis

import (
	"context"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dispatch-webhooks/dispatch/internal/batch"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// Limits of one group commit of Publish calls: up to maxPublishCalls calls
// and maxPublishEntries entries in one pipeline (one call with more entries
// goes alone). A few hundred XADDs keep a pipeline's reply, and Redis's
// time on it, short.
const (
	maxPublishCalls   = 512
	maxPublishEntries = 1024
)

// publisher returns the group commit of Publish calls to the stream at key.
func (q *Queue) publisher(key string) *batch.Batcher[[]ports.Entry] {
	if b, ok := q.publishers.Load(key); ok {
		return b.(*batch.Batcher[[]ports.Entry])
	}
	b := batch.New(func(ctx context.Context, calls [][]ports.Entry, errs []error) {
		q.publishBatch(ctx, key, calls, errs)
	}, batch.Limits[[]ports.Entry]{
		MaxItems:  maxPublishCalls,
		MaxWeight: maxPublishEntries,
		Weigh:     func(entries []ports.Entry) int { return len(entries) },
	})
	actual, _ := q.publishers.LoadOrStore(key, b)
	return actual.(*batch.Batcher[[]ports.Entry])
}

// publishBatch is the batch.WriteFunc of Publish: the entries of every
// call, in call order, as XADDs to key in one pipeline. Each XADD has its
// own reply, so a call fails only if one of its own entries was not
// appended; a broken connection fails every call.
//
// The pipeline is a transaction (MULTI … EXEC), so that readers blocked on
// the stream see the batch whole. Redis serves blocked readers after each
// command it runs; a plain pipeline's first XADD would wake one reader
// with one entry, the second the next reader with the next, and so on, so
// that with several consumers, or one that has just caught up, a batch of
// entries was read in reads of one, each then claimed, admitted and
// recorded in a batch of its own. After EXEC the first blocked reader
// takes the whole batch in one read.
func (q *Queue) publishBatch(ctx context.Context, key string, calls [][]ports.Entry, errs []error) {
	if len(calls) == 1 && len(calls[0]) == 1 {
		errs[0] = interpretError(q.client.XAdd(ctx, q.xaddArgs(key, calls[0][0])).Err())
		return
	}
	cmds := make([][]*goredis.StringCmd, len(calls))
	// TxPipelined's own error is the first command's failure; each command
	// carries its own, read below (EXEC runs every queued command, whatever
	// one of them replies).
	_, _ = q.client.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		for i, entries := range calls {
			cmds[i] = make([]*goredis.StringCmd, len(entries))
			for j, e := range entries {
				cmds[i][j] = p.XAdd(ctx, q.xaddArgs(key, e))
			}
		}
		return nil
	})
	for i, callCmds := range cmds {
		for _, cmd := range callCmds {
			if err := cmd.Err(); err != nil {
				errs[i] = interpretError(err)
				break
			}
		}
	}
}
