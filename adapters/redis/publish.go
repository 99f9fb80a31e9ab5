package redis

import (
	"context"
	"sync"

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

// publisher returns the group commit of Publish calls to stream.
func (q *Queue) publisher(stream string) *batch.Batcher[[]ports.Entry] {
	if b, ok := q.publishers.Load(stream); ok {
		return b.(*batch.Batcher[[]ports.Entry])
	}
	b := batch.New(func(ctx context.Context, calls [][]ports.Entry, errs []error) {
		q.publishBatch(ctx, stream, calls, errs)
	}, batch.Limits[[]ports.Entry]{
		MaxItems:  maxPublishCalls,
		MaxWeight: maxPublishEntries,
		Weigh:     func(entries []ports.Entry) int { return len(entries) },
	})
	actual, _ := q.publishers.LoadOrStore(stream, b)
	return actual.(*batch.Batcher[[]ports.Entry])
}

// xadd is one XADD of a batch: which call it belongs to, and its entry.
type xadd struct {
	call  int
	entry ports.Entry
	cmd   *goredis.StringCmd
}

// publishBatch is the batch.WriteFunc of Publish: the entries of every
// call, in call order, as XADDs to the partitions of their keys. Each XADD
// has its own reply, so a call fails only if one of its own entries was
// not appended; a broken connection fails every call.
//
// The XADDs to a partition are a transaction (MULTI … EXEC), so that
// readers blocked on it see the batch whole. Redis serves blocked readers
// after each command it runs; a plain pipeline's first XADD would wake one
// reader with one entry, the second the next reader with the next, and so
// on, so that with several consumers, or one that has just caught up, a
// batch of entries was read in reads of one, each then claimed, admitted
// and recorded in a batch of its own. After EXEC the first blocked reader
// takes the whole batch in one read. On one Redis the whole batch is one
// transaction, one round trip; on Redis Cluster a transaction cannot span
// slots, so each partition has its own, all sent at once.
func (q *Queue) publishBatch(ctx context.Context, stream string, calls [][]ports.Entry, errs []error) {
	if len(calls) == 1 && len(calls[0]) == 1 {
		e := calls[0][0]
		errs[0] = interpretError(q.client.XAdd(ctx, q.xaddArgs(q.partitionKey(stream, q.partitionOf(e.Key)), e)).Err())
		return
	}
	byPartition := make(map[int][]xadd)
	for i, entries := range calls {
		for _, e := range entries {
			n := q.partitionOf(e.Key)
			byPartition[n] = append(byPartition[n], xadd{call: i, entry: e})
		}
	}
	queue := func(p goredis.Pipeliner, n int, adds []xadd) {
		key := q.partitionKey(stream, n)
		for i := range adds {
			adds[i].cmd = p.XAdd(ctx, q.xaddArgs(key, adds[i].entry))
		}
	}
	// TxPipelined's own error is the first command's failure; each command
	// carries its own, read below (EXEC runs every queued command, whatever
	// one of them replies).
	if !q.cluster || len(byPartition) == 1 {
		_, _ = q.client.TxPipelined(ctx, func(p goredis.Pipeliner) error {
			for n, adds := range byPartition {
				queue(p, n, adds)
			}
			return nil
		})
	} else {
		var wg sync.WaitGroup
		for n, adds := range byPartition {
			wg.Go(func() {
				_, _ = q.client.TxPipelined(ctx, func(p goredis.Pipeliner) error {
					queue(p, n, adds)
					return nil
				})
			})
		}
		wg.Wait()
	}
	for _, adds := range byPartition {
		for _, a := range adds {
			if err := a.cmd.Err(); err != nil && errs[a.call] == nil {
				errs[a.call] = interpretError(err)
			}
		}
	}
}
