package redis

import (
	"cmp"
	"context"
	_ "embed" // queue_read.lua
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dispatch-webhooks/dispatch/ports"
)

// Queue defaults.
const (
	// DefaultPrefix starts every key the queue writes.
	DefaultPrefix = "dispatch:"
	// DefaultName is the queue name inside every stream's hash tag.
	DefaultName = "dispatch"
	// DefaultPartitions is how many streams each queue stream is split into.
	DefaultPartitions = 16
	// MaxPartitions bounds Partitions: each one is a stream every Read,
	// Reclaim, Trim and Lag visits.
	MaxPartitions = 1024
	// DefaultBlockSlice is the longest single XREADGROUP BLOCK; see
	// QueueOptions.BlockSlice.
	DefaultBlockSlice = 100 * time.Millisecond
)

// The fields of a stream entry: its body, and its key unless that is
// empty. They are short because they are stored once per entry.
const (
	bodyField = "b"
	keyField  = "k"
)

// reclaimPages bounds how many XAUTOCLAIM calls one Reclaim makes in one
// partition, so a huge pending list is walked over several Reclaim calls
// instead of one slow one.
const reclaimPages = 8

// defaultReclaimCount is XAUTOCLAIM's own default COUNT, used when the caller
// asks for count <= 0.
const defaultReclaimCount = 100

// QueueOptions configures a Queue. The zero value is valid and means the
// same as DefaultQueueOptions: default prefix, name and partitions, no
// MAXLEN cap, default block slice.
type QueueOptions struct {
	// Prefix starts every key, so several deployments (or tests) can share
	// one Redis. "" means DefaultPrefix. It must not contain '{' or '}',
	// which would break the hash tag that follows it.
	Prefix string
	// Name starts every stream's hash tag: partition n of stream s is the
	// key <Prefix>{<Name>:<s>:<n>}. "" means DefaultName. It must not
	// contain '{' or '}'.
	Name string
	// Partitions is how many streams each queue stream is split into. An
	// entry goes to the partition its key hashes to, so the entries of one
	// key keep their order; each partition is a key of its own hash tag,
	// so on Redis Cluster the partitions spread over the shards. 0 means
	// DefaultPartitions. Changing it needs no migration: entries left in
	// partitions no longer read are recovered from PostgreSQL by the
	// scheduler's scans.
	Partitions int
	// MaxLen, when above 0, caps each partition at about this many entries
	// on every XADD (MAXLEN ~, which Redis applies cheaply, whole
	// macro-nodes at a time). Streams are kept short by Trim, which removes
	// only what every consumer group has acknowledged; MaxLen is an opt-in
	// hard cap on Redis memory for when consumers fall far behind. Unlike
	// Trim it drops the oldest entries whether or not a group has read or
	// acknowledged them, so once the backlog exceeds MaxLen it drops
	// unprocessed work. PostgreSQL holds the state of every event and
	// delivery, and the scheduler's outbox sweep re-enqueues what a stream
	// lost, so a cap costs latency, not data. 0, the default, leaves MAXLEN
	// out.
	MaxLen int64
	// BlockSlice is the longest single server-side BLOCK of a Read that
	// cannot block on every partition at once: on Redis Cluster, where a
	// command cannot span slots, or when a Read asks for fewer entries
	// than there are partitions. It blocks on some partitions and looks at
	// the others between slices, so this bounds how long an entry there
	// can wait for an idle consumer. A Read that blocks on every partition
	// blocks once for its whole wait: an idle consumer then costs one
	// round trip per Read's block, not one per slice. go-redis does not
	// interrupt a blocked command when its context is cancelled, so a
	// cancelled Read keeps waiting up to its block or slice (graceful
	// shutdown). 0 means DefaultBlockSlice.
	BlockSlice time.Duration
}

// DefaultQueueOptions returns the production defaults: DefaultPrefix,
// DefaultName, DefaultPartitions, DefaultBlockSlice, and no MAXLEN cap
// (streams are kept short by Trim).
func DefaultQueueOptions() QueueOptions {
	return QueueOptions{Prefix: DefaultPrefix, Name: DefaultName, Partitions: DefaultPartitions, BlockSlice: DefaultBlockSlice}
}

// Validate reports the first invalid option.
func (o QueueOptions) Validate() error {
	if strings.ContainsAny(o.Prefix, "{}") {
		return fmt.Errorf("redis queue: prefix must not contain '{' or '}', got %q", o.Prefix)
	}
	if strings.ContainsAny(o.Name, "{}") {
		return fmt.Errorf("redis queue: name must not contain '{' or '}', got %q", o.Name)
	}
	if o.Partitions < 0 || o.Partitions > MaxPartitions {
		return fmt.Errorf("redis queue: partitions must be 1..%d (0 for %d), got %d", MaxPartitions, DefaultPartitions, o.Partitions)
	}
	if o.MaxLen < 0 {
		return fmt.Errorf("redis queue: max length must be >= 0 (0 leaves MAXLEN out), got %d", o.MaxLen)
	}
	if o.BlockSlice < 0 {
		return fmt.Errorf("redis queue: block slice must be >= 0, got %s", o.BlockSlice)
	}
	return nil
}

// Queue is ports.Queue on Redis Streams: each queue stream is Partitions
// Redis streams, read through consumer groups (XREADGROUP), acknowledged
// with XACK, reclaimed with XAUTOCLAIM and trimmed with XTRIM MINID. It
// runs on one Redis or on Redis Cluster (a goredis.ClusterClient): every
// transaction and multi-key command stays within one partition's slot.
// Safe for concurrent use.
type Queue struct {
	client     goredis.UniversalClient
	cluster    bool
	prefix     string
	name       string
	partitions int
	maxLen     int64
	blockSlice time.Duration

	// turn rotates where walks over the partitions start.
	turn atomic.Uint64

	// cursors remembers where the last Reclaim of each partition and group
	// stopped, so successive Reclaims walk the whole pending list instead of
	// rescanning its head (XAUTOCLAIM's intended use), and in which
	// partition the last Reclaim of each stream and group stopped.
	mu          sync.Mutex
	cursors     map[string]string
	reclaimNext map[string]int

	// publishers holds the group commit of Publish for each stream
	// (*batch.Batcher[[]ports.Entry]). Streams are a fixed, small set
	// (events, deliveries), so it is never pruned.
	publishers sync.Map

	// readers remembers, for each stream, group and consumer, whether its
	// last Read left every partition empty (see Read): a few consumers
	// per process, so it is never pruned.
	readers sync.Map
}

var _ ports.Queue = (*Queue)(nil)

// NewQueue returns a Queue on client, a single Redis or a Cluster. The
// caller owns client and closes it.
func NewQueue(client goredis.UniversalClient, opts QueueOptions) (*Queue, error) {
	if client == nil {
		return nil, errors.New("redis queue: client is nil")
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	return &Queue{
		client:      client,
		cluster:     isCluster(client),
		prefix:      cmp.Or(opts.Prefix, DefaultPrefix),
		name:        cmp.Or(opts.Name, DefaultName),
		partitions:  cmp.Or(opts.Partitions, DefaultPartitions),
		maxLen:      opts.MaxLen,
		blockSlice:  cmp.Or(opts.BlockSlice, DefaultBlockSlice),
		cursors:     make(map[string]string),
		reclaimNext: make(map[string]int),
	}, nil
}

// Publish appends entries to stream, each to the partition of its key.
// Concurrent Publish calls to one stream are group-committed: their XADDs
// go out together, one round trip for up to maxPublishCalls callers (see
// publishBatch), and each call returns once its entries were appended, or
// with the error of the first of them that was not. Each call's entries of
// one partition are appended in order and next to each other.
//
// If ctx ends while the call waits for its pipeline, Publish returns ctx's
// error at once and appends nothing. If ctx ends while its pipeline is on
// its way, Publish returns ctx's error at once, but the pipeline goes on
// for the other callers and the entries may be appended all the same (the
// port allows it: "on error some may have been appended").
func (q *Queue) Publish(ctx context.Context, stream string, entries ...ports.Entry) error {
	if len(entries) == 0 {
		return nil
	}
	// A copy: a caller that gives up may reuse its slice while the pipeline
	// holding it is still being written.
	if err := q.publisher(stream).Commit(ctx, slices.Clone(entries)); err != nil {
		if len(entries) == 1 {
			return fmt.Errorf("redis queue: publish to %s: %w", stream, err)
		}
		return fmt.Errorf("redis queue: publish %d entries to %s: %w", len(entries), stream, err)
	}
	return nil
}

func (q *Queue) xaddArgs(key string, e ports.Entry) *goredis.XAddArgs {
	// One allocation per entry, on the append's hot path.
	values := []string{bodyField, e.Body, keyField, e.Key}
	if e.Key == "" {
		values = values[:2]
	}
	return &goredis.XAddArgs{
		Stream: key,
		MaxLen: q.maxLen, // 0 leaves MAXLEN out
		Approx: true,
		Values: values,
	}
}

// Read reads up to count new entries from the partitions of stream. It
// first looks at every partition without blocking (see sweep); when all
// are empty it blocks (see blockRead), on every partition at once for the
// whole block when it can, otherwise in slices of at most BlockSlice on
// some of them with the others looked at between slices, and then fills
// the batch from the other partitions. Groups (and streams) are created
// on the first NOGROUP reply.
//
// A consumer that left every partition empty on its last read (its
// reader is keeping up, as at any everyday rate) skips the first sweep
// and the fill: the blocking read alone, on every partition at once,
// returns at once what arrived meanwhile and otherwise waits. So a read
// that keeps up costs one round trip instead of three, and an idle one a
// blocking read per block and nothing else. It sweeps again
// as soon as a read may have left entries behind.
func (q *Queue) Read(ctx context.Context, stream, group, consumer string, count int, block time.Duration) ([]ports.Message, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	count = max(count, 0) // 0: no limit
	keys := q.partitionKeys(stream)
	deadline := time.Now().Add(block)
	reader := stream + "\x00" + group + "\x00" + consumer
	// The blocking read covers every partition only on one Redis and
	// when count allows one entry from each (see blockRead).
	whole := !q.cluster && (count == 0 || count >= len(keys))
	caughtUp := whole && q.caughtUp(reader)
	for {
		if !caughtUp {
			msgs, err := q.sweep(ctx, keys, group, consumer, count)
			if err != nil || len(msgs) > 0 {
				// Fewer than asked for: the sweep emptied every partition.
				q.setCaughtUp(reader, whole && err == nil && (count == 0 || len(msgs) < count))
				return msgs, err
			}
		}
		remaining := time.Until(deadline)
		if remaining <= 0 {
			q.setCaughtUp(reader, whole)
			return []ports.Message{}, nil
		}
		slice := remaining
		if !whole {
			slice = min(slice, q.blockSlice)
		}
		if d, ok := ctx.Deadline(); ok {
			// go-redis would turn a ctx deadline inside the BLOCK into a
			// socket timeout and drop the connection; stop short instead.
			slice = min(slice, time.Until(d))
		}
		// BLOCK counts whole milliseconds and BLOCK 0 waits forever.
		slice = max(slice, time.Millisecond)
		msgs, capped, err := q.blockRead(ctx, keys, group, consumer, count, slice)
		if err != nil {
			q.setCaughtUp(reader, false)
			if ctxErr := ctx.Err(); ctxErr != nil {
				return nil, ctxErr
			}
			return nil, fmt.Errorf("redis queue: read %s as %s/%s: %w", stream, group, consumer, interpretError(err))
		}
		if len(msgs) > 0 {
			// Even if ctx ended meanwhile: these entries are now pending
			// for consumer, and handing them over beats leaving them to
			// wait out the visibility timeout. When the read covered every
			// partition and none filled its share, it took everything there
			// was; otherwise the rest of the batch comes from the other
			// partitions, without waiting.
			if whole && !capped {
				q.setCaughtUp(reader, true)
				return msgs, nil
			}
			if count == 0 || len(msgs) < count {
				asked := count - len(msgs)
				more, err := q.sweep(context.WithoutCancel(ctx), keys, group, consumer, asked)
				if err == nil {
					msgs = append(msgs, more...)
				}
				q.setCaughtUp(reader, whole && err == nil && asked > 0 && len(more) < asked)
				return msgs, nil
			}
			q.setCaughtUp(reader, false)
			return msgs, nil
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		// A slice that found nothing on every partition leaves nothing to
		// sweep before the next one; a group gone (flushed) is made again
		// by the sweep.
		caughtUp = whole && !capped
	}
}

// caughtUp reports whether reader's last Read left every partition empty.
func (q *Queue) caughtUp(reader string) bool {
	v, ok := q.readers.Load(reader)
	return ok && v.(bool)
}

func (q *Queue) setCaughtUp(reader string, caughtUp bool) {
	if q.caughtUp(reader) != caughtUp {
		q.readers.Store(reader, caughtUp)
	}
}

// sweep reads up to count entries (0: no limit) from the partitions at
// keys without blocking: one pipeline of XREADGROUP ... COUNT per round
// (go-redis sends a Cluster pipeline to each node at once), the count
// shared among the partitions not yet found empty, until count entries
// came or every partition is empty. A partition that returns fewer entries
// than it was asked for is empty; one that returns as many may hold more
// and is asked again for what is still missing, so a batch is never larger
// than count and a full partition is not starved by empty ones. The walk
// starts at a rotating partition.
//
// On one Redis it is instead one script (queue_read.lua) that reads the
// partitions in turn, each for what is still missing: one round trip.
func (q *Queue) sweep(ctx context.Context, keys []string, group, consumer string, count int) ([]ports.Message, error) {
	start := q.rotation()
	order := make([]int, len(keys))
	for i := range order {
		order[i] = (start + i) % len(keys)
	}
	if !q.cluster {
		return q.sweepScript(ctx, keys, order, group, consumer, count)
	}
	empty := make([]bool, len(keys))
	created := make([]bool, len(keys))
	msgs := []ports.Message{}
	type ask struct {
		n     int
		count int
		cmd   *goredis.XStreamSliceCmd
	}
	for {
		remaining := count - len(msgs)
		if count > 0 && remaining <= 0 {
			return msgs, nil
		}
		var candidates []int
		for _, n := range order {
			if !empty[n] {
				candidates = append(candidates, n)
			}
		}
		if len(candidates) == 0 {
			return msgs, nil
		}
		asks := make([]ask, 0, len(candidates))
		switch {
		case count == 0:
			for _, n := range candidates {
				asks = append(asks, ask{n: n})
			}
		case remaining >= len(candidates):
			share, extra := remaining/len(candidates), remaining%len(candidates)
			for i, n := range candidates {
				c := share
				if i < extra {
					c++
				}
				asks = append(asks, ask{n: n, count: c})
			}
		default:
			for _, n := range candidates[:remaining] {
				asks = append(asks, ask{n: n, count: 1})
			}
		}
		pipe := q.client.Pipeline()
		for i := range asks {
			asks[i].cmd = pipe.XReadGroup(ctx, &goredis.XReadGroupArgs{
				Group:    group,
				Consumer: consumer,
				Streams:  []string{keys[asks[i].n], ">"},
				Count:    int64(asks[i].count),
				Block:    -1, // negative: go-redis leaves BLOCK out, no wait
			})
		}
		_, _ = pipe.Exec(ctx) // each command carries its own error
		var noGroup []string
		var firstErr error
		for _, a := range asks {
			streams, err := a.cmd.Result()
			switch {
			case err == nil:
				got := toMessages(a.n, streams)
				msgs = append(msgs, got...)
				if a.count == 0 || len(got) < a.count {
					empty[a.n] = true
				}
			case errors.Is(err, goredis.Nil):
				empty[a.n] = true
			case isNoGroup(err) && !created[a.n]:
				created[a.n] = true
				noGroup = append(noGroup, keys[a.n])
			default:
				empty[a.n] = true
				if firstErr == nil {
					firstErr = err
				}
			}
		}
		if firstErr != nil {
			if len(msgs) > 0 {
				// They are pending for consumer now: hand them over; the
				// failing partition fails the next Read.
				return msgs, nil
			}
			if ctxErr := ctx.Err(); ctxErr != nil {
				return nil, ctxErr
			}
			return nil, fmt.Errorf("redis queue: read as %s/%s: %w", group, consumer, interpretError(firstErr))
		}
		if err := q.createGroups(ctx, noGroup, group); err != nil {
			if len(msgs) > 0 {
				return msgs, nil
			}
			return nil, err
		}
	}
}

//go:embed queue_read.lua
var queueReadLua string

var queueRead = goredis.NewScript(queueReadLua)

// sweepScript is sweep on one Redis: queue_read.lua on the partitions at
// keys, in order.
func (q *Queue) sweepScript(ctx context.Context, keys []string, order []int, group, consumer string, count int) ([]ports.Message, error) {
	ordered := make([]string, len(order))
	for i, n := range order {
		ordered[i] = keys[n]
	}
	reply, err := queueRead.Run(ctx, q.client, ordered, group, consumer, count).Slice()
	if err != nil && !errors.Is(err, goredis.Nil) {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, ctxErr
		}
		return nil, fmt.Errorf("redis queue: read as %s/%s: %w", group, consumer, interpretError(err))
	}
	msgs := []ports.Message{}
	for _, r := range reply {
		pair, ok := r.([]any)
		if !ok || len(pair) < 2 {
			continue
		}
		i, ok := pair[0].(int64)
		if !ok || i < 0 || int(i) >= len(order) {
			continue
		}
		n := order[i]
		entries, _ := pair[1].([]any)
		for _, e := range entries {
			entry, ok := e.([]any)
			if !ok || len(entry) < 1 {
				continue
			}
			id, ok := entry[0].(string)
			if !ok {
				continue
			}
			var fields any
			if len(entry) > 1 {
				fields = entry[1]
			}
			key, body, _ := entryFields(fields)
			msgs = append(msgs, ports.Message{ID: messageID(n, id), Key: key, Body: body})
		}
	}
	return msgs, nil
}

// blockRead waits up to slice for new entries and returns at most count of
// them (0: no limit). On one Redis it is one XREADGROUP ... BLOCK on up to
// count partitions (all of them when count allows), each asked for an
// equal share of count, so whatever Redis version serves it the reply
// cannot exceed count. On Redis Cluster a command cannot span slots: it
// blocks on one partition, a different one each slice, and the sweep
// between slices looks at the others. capped is true when a partition
// gave its whole share, so it may hold more.
func (q *Queue) blockRead(ctx context.Context, keys []string, group, consumer string, count int, slice time.Duration) (msgs []ports.Message, capped bool, err error) {
	start := q.rotation()
	n := len(keys)
	if count > 0 {
		n = min(n, count)
	}
	if q.cluster {
		n = 1
	}
	parts := make([]int, n)
	streams := make([]string, 0, 2*n)
	for i := range parts {
		parts[i] = (start + i) % len(keys)
		streams = append(streams, keys[parts[i]])
	}
	for range parts {
		streams = append(streams, ">")
	}
	perStream := 0
	if count > 0 {
		perStream = count / n
	}
	reply, err := q.client.XReadGroup(ctx, &goredis.XReadGroupArgs{
		Group:    group,
		Consumer: consumer,
		Streams:  streams,
		Count:    int64(perStream),
		Block:    slice,
	}).Result()
	switch {
	case err == nil:
	case errors.Is(err, goredis.Nil):
		return nil, false, nil // the block expired with nothing new
	case isNoGroup(err):
		// Flushed meanwhile: the next sweep recreates the group, and
		// capped makes the next Read sweep.
		return nil, true, nil
	default:
		return nil, false, err
	}
	msgs = []ports.Message{}
	for _, s := range reply {
		capped = capped || (perStream > 0 && len(s.Messages) >= perStream)
		for i, key := range streams[:n] {
			if key == s.Stream {
				msgs = append(msgs, toMessages(parts[i], []goredis.XStream{s})...)
				break
			}
		}
	}
	return msgs, capped, nil
}

// createGroups creates group on each of keys reading from the stream's
// start, and the stream if it does not exist yet, in one pipeline. Another
// consumer may win the race; its BUSYGROUP reply means the group is there,
// which is all that matters.
func (q *Queue) createGroups(ctx context.Context, keys []string, group string) error {
	if len(keys) == 0 {
		return nil
	}
	pipe := q.client.Pipeline()
	cmds := make([]*goredis.StatusCmd, len(keys))
	for i, key := range keys {
		cmds[i] = pipe.XGroupCreateMkStream(ctx, key, group, "0")
	}
	_, _ = pipe.Exec(ctx)
	for i, cmd := range cmds {
		if err := cmd.Err(); err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
			return fmt.Errorf("redis queue: create group %s on %s: %w", group, keys[i], interpretError(err))
		}
	}
	return nil
}

// isNoGroup reports the reply to reading a group (or stream) that does not
// exist; it also follows a FLUSHALL, after which groups are recreated.
func isNoGroup(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOGROUP")
}

// Ack acknowledges ids with one XACK per partition, in one pipeline. XACK
// ignores ids that are not pending, a missing stream or group acknowledges
// nothing without an error, and ids this queue did not hand out are
// ignored the same way.
func (q *Queue) Ack(ctx context.Context, stream, group string, ids ...string) error {
	if len(ids) == 0 {
		return nil
	}
	byPartition := make(map[int][]string)
	for _, id := range ids {
		if n, streamID, ok := q.splitMessageID(id); ok {
			byPartition[n] = append(byPartition[n], streamID)
		}
	}
	if len(byPartition) == 0 {
		return nil
	}
	var err error
	if len(byPartition) == 1 {
		for n, streamIDs := range byPartition {
			err = q.client.XAck(ctx, q.partitionKey(stream, n), group, streamIDs...).Err()
		}
	} else {
		_, err = q.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for n, streamIDs := range byPartition {
				p.XAck(ctx, q.partitionKey(stream, n), group, streamIDs...)
			}
			return nil
		})
	}
	if err != nil {
		return fmt.Errorf("redis queue: ack %d entries of %s for %s: %w", len(ids), stream, group, interpretError(err))
	}
	return nil
}

// Reclaim walks the partitions of stream, from the one where the previous
// Reclaim of this stream and group stopped, running XAUTOCLAIM in each from
// where its previous walk stopped, for up to reclaimPages pages, until
// count entries are claimed or every pending list has been walked to its
// end. Entries whose data was trimmed (Redis 7 lists them as deleted ids;
// Redis 6.2 returns them with no fields) are acknowledged and skipped.
func (q *Queue) Reclaim(ctx context.Context, stream, group, consumer string, minIdle time.Duration, count int) ([]ports.Message, error) {
	if count <= 0 {
		count = defaultReclaimCount
	}
	walkKey := stream + "\x00" + group
	q.mu.Lock()
	first := q.reclaimNext[walkKey] % q.partitions
	q.mu.Unlock()

	msgs := []ports.Message{}
	next := first
	for i := range q.partitions {
		n := (first + i) % q.partitions
		claimed, err := q.reclaimPartition(ctx, stream, n, group, consumer, minIdle, count-len(msgs))
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, claimed...)
		if len(msgs) >= count {
			next = n // more may be waiting here: start here next time
			break
		}
	}
	q.mu.Lock()
	q.reclaimNext[walkKey] = next
	q.mu.Unlock()
	return msgs, nil
}

// reclaimPartition is Reclaim within partition n.
func (q *Queue) reclaimPartition(ctx context.Context, stream string, n int, group, consumer string, minIdle time.Duration, count int) ([]ports.Message, error) {
	key := q.partitionKey(stream, n)
	cursorKey := key + "\x00" + group
	q.mu.Lock()
	start := q.cursors[cursorKey]
	q.mu.Unlock()
	if start == "" {
		start = "0-0"
	}

	msgs := []ports.Message{}
	var trimmed []string
	for page := 0; page < reclaimPages && len(msgs) < count; page++ {
		reply, err := q.client.Do(ctx, "XAUTOCLAIM", key, group, consumer,
			minIdle.Milliseconds(), start, "COUNT", count-len(msgs)).Slice()
		if isNoGroup(err) {
			return msgs, nil // no group, nothing pending
		}
		if err != nil {
			return nil, fmt.Errorf("redis queue: reclaim %s for %s/%s: %w", key, group, consumer, interpretError(err))
		}
		next, claimed, deleted, err := parseAutoclaim(n, reply)
		if err != nil {
			return nil, fmt.Errorf("redis queue: reclaim %s for %s/%s: %w", key, group, consumer, err)
		}
		for _, c := range claimed {
			if c.trimmed {
				trimmed = append(trimmed, c.streamID)
				continue
			}
			msgs = append(msgs, c.msg)
		}
		trimmed = append(trimmed, deleted...)
		start = next
		if next == "0-0" {
			break // walked to the end; the next Reclaim starts over
		}
	}
	q.mu.Lock()
	q.cursors[cursorKey] = start
	q.mu.Unlock()

	// Redis 7 already dropped deleted ids from the pending list; Redis 6.2
	// did not. XACK is right for both and costs a round trip only when
	// something was trimmed.
	if len(trimmed) > 0 {
		if err := q.client.XAck(ctx, key, group, trimmed...).Err(); err != nil {
			return nil, fmt.Errorf("redis queue: ack trimmed entries of %s for %s: %w", key, group, interpretError(err))
		}
	}
	return msgs, nil
}

// Trim trims every partition of stream (see trimPartition).
func (q *Queue) Trim(ctx context.Context, stream string) error {
	for n := range q.partitions {
		if err := q.trimPartition(ctx, q.partitionKey(stream, n)); err != nil {
			return err
		}
	}
	return nil
}

// trimPartition removes with XTRIM MINID the entries of the stream at key
// older than the oldest one some consumer group still needs. For each group
// (XINFO GROUPS) that is its oldest pending entry (the XPENDING summary's
// smallest id) or, with nothing pending, the entry after its
// last-delivered-id, so a group that has read nothing yet
// (last-delivered-id 0-0) keeps the whole stream. Redis 7's lag is not
// used: it counts unread entries but not pending ones, and is unknown (nil)
// after some deletions.
//
// Trimming is exact (MINID =, not ~). ~ removes whole macro-nodes only (100
// entries by default), so a short stream would never shrink and what is
// kept would differ from miniredis and the memory queue; exact trimming
// costs at most one partial node more, and Trim runs once per scheduler
// tick, not on every XADD.
//
// The groups are read before the trim, not atomically with it. That is
// safe because what a group needs only moves forward: its last-delivered-id
// grows, and new pending entries come after it. A group created meanwhile
// sees the stream as trimmed, as if it had been created just after Trim.
func (q *Queue) trimPartition(ctx context.Context, key string) error {
	groups, err := q.client.XInfoGroups(ctx, key).Result()
	if isNoSuchKey(err) {
		return nil // no stream, nothing to trim
	}
	if err != nil {
		return fmt.Errorf("redis queue: trim %s: list groups: %w", key, interpretError(err))
	}
	if len(groups) == 0 {
		return nil // without groups nobody has said what it is done with
	}

	// The smallest pending id, for the groups that have pending entries.
	pending := make([]*goredis.XPendingCmd, len(groups))
	pipe := q.client.Pipeline()
	for i, g := range groups {
		if g.Pending > 0 {
			pending[i] = pipe.XPending(ctx, key, g.Name)
		}
	}
	if pipe.Len() > 0 {
		_, _ = pipe.Exec(ctx) // each command carries its own error
	}

	minID := streamID{ms: math.MaxUint64, seq: math.MaxUint64}
	for i, g := range groups {
		need, err := parseStreamID(g.LastDeliveredID)
		if err != nil {
			return fmt.Errorf("redis queue: trim %s: group %s: last-delivered-id: %w", key, g.Name, err)
		}
		need = need.next()
		if pending[i] != nil {
			p, err := pending[i].Result()
			switch {
			case err == nil && p.Count > 0:
				lower, err := parseStreamID(p.Lower)
				if err != nil {
					return fmt.Errorf("redis queue: trim %s: group %s: smallest pending id: %w", key, g.Name, err)
				}
				if lower.compare(need) < 0 {
					need = lower
				}
			case err == nil, isNoGroup(err):
				// Acknowledged or destroyed since XINFO GROUPS: the entry
				// after last-delivered-id is still a safe bound.
			default:
				return fmt.Errorf("redis queue: trim %s: pending entries of %s: %w", key, g.Name, interpretError(err))
			}
		}
		if need.compare(minID) < 0 {
			minID = need
		}
	}
	if minID.compare(streamID{seq: 1}) <= 0 {
		return nil // some group has read nothing yet: keep everything
	}
	if err := q.client.XTrimMinID(ctx, key, minID.String()).Err(); err != nil {
		return fmt.Errorf("redis queue: trim %s to %s: %w", key, minID, interpretError(err))
	}
	return nil
}

// isNoSuchKey reports XINFO's reply for a stream that does not exist.
func isNoSuchKey(err error) bool {
	return err != nil && strings.Contains(err.Error(), "no such key")
}

// Ping reports whether Redis answers.
func (q *Queue) Ping(ctx context.Context) error {
	if err := q.client.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis queue: ping: %w", interpretError(err))
	}
	return nil
}

// toMessages converts an XREADGROUP reply from partition n. An entry without the body field
// (or with a non-string one) comes back with Body "" rather than failing
// the batch, so the application can acknowledge and count it.
func toMessages(n int, streams []goredis.XStream) []ports.Message {
	size := 0
	for _, s := range streams {
		size += len(s.Messages)
	}
	msgs := make([]ports.Message, 0, size)
	for _, s := range streams {
		for _, m := range s.Messages {
			body, _ := m.Values[bodyField].(string)
			key, _ := m.Values[keyField].(string)
			msgs = append(msgs, ports.Message{ID: messageID(n, m.ID), Key: key, Body: body})
		}
	}
	return msgs
}

// claimedEntry is one entry of an XAUTOCLAIM reply.
type claimedEntry struct {
	msg      ports.Message
	streamID string // the entry's id in its stream
	trimmed  bool   // Redis 6.2: the entry is pending but its data is gone
}

// parseAutoclaim reads a raw XAUTOCLAIM reply: [next-cursor, [[id, [field,
// value, ...]] ...], [deleted-id ...]]. go-redis's typed XAutoClaim
// discards the deleted ids, which Reclaim needs, hence the raw command.
// Only a malformed reply is an error; one odd entry never fails the page:
// without the body field it comes back with Body "" (the application
// acknowledges and counts it), and without a readable id it is skipped.
func parseAutoclaim(n int, reply []any) (next string, claimed []claimedEntry, deleted []string, err error) {
	if len(reply) < 2 {
		return "", nil, nil, fmt.Errorf("unexpected XAUTOCLAIM reply with %d elements", len(reply))
	}
	next, ok := reply[0].(string)
	if !ok {
		return "", nil, nil, fmt.Errorf("unexpected XAUTOCLAIM cursor %T", reply[0])
	}
	entries, ok := reply[1].([]any)
	if !ok && reply[1] != nil {
		return "", nil, nil, fmt.Errorf("unexpected XAUTOCLAIM entries %T", reply[1])
	}
	for _, e := range entries {
		// An entry without a readable id cannot be returned or acknowledged;
		// skipping it keeps the rest of the page (the cursor moves past it
		// either way) instead of failing every Reclaim from here on.
		pair, ok := e.([]any)
		if !ok || len(pair) < 1 {
			continue
		}
		id, ok := pair[0].(string)
		if !ok {
			continue
		}
		var fields any
		if len(pair) > 1 {
			fields = pair[1]
		}
		key, body, present := entryFields(fields)
		claimed = append(claimed, claimedEntry{msg: ports.Message{ID: messageID(n, id), Key: key, Body: body}, streamID: id, trimmed: !present})
	}
	if len(reply) > 2 {
		ids, _ := reply[2].([]any)
		for _, v := range ids {
			if id, ok := v.(string); ok {
				deleted = append(deleted, id)
			}
		}
	}
	return next, claimed, deleted, nil
}

// entryFields finds the key and the body among an entry's fields, which
// RESP2 sends as a flat array and RESP3 may send as a map. present is false
// when the entry has no data at all.
func entryFields(fields any) (key, body string, present bool) {
	switch f := fields.(type) {
	case []any:
		for i := 0; i+1 < len(f); i += 2 {
			switch name, _ := f[i].(string); name {
			case bodyField:
				body, _ = f[i+1].(string)
			case keyField:
				key, _ = f[i+1].(string)
			}
		}
		return key, body, len(f) > 0
	case map[any]any:
		body, _ = f[bodyField].(string)
		key, _ = f[keyField].(string)
		return key, body, len(f) > 0
	case map[string]any:
		body, _ = f[bodyField].(string)
		key, _ = f[keyField].(string)
		return key, body, len(f) > 0
	default:
		return "", "", false
	}
}

// streamID is a stream entry id, "<ms>-<seq>", ordered like Redis orders it.
type streamID struct{ ms, seq uint64 }

// parseStreamID accepts "<ms>-<seq>" and "<ms>" (miniredis reports a group
// created at "0" with last-delivered-id "0").
func parseStreamID(s string) (streamID, error) {
	msPart, seqPart, hasSeq := strings.Cut(s, "-")
	ms, err := strconv.ParseUint(msPart, 10, 64)
	if err != nil {
		return streamID{}, fmt.Errorf("invalid stream id %q", s)
	}
	var seq uint64
	if hasSeq {
		if seq, err = strconv.ParseUint(seqPart, 10, 64); err != nil {
			return streamID{}, fmt.Errorf("invalid stream id %q", s)
		}
	}
	return streamID{ms: ms, seq: seq}, nil
}

func (id streamID) String() string {
	return strconv.FormatUint(id.ms, 10) + "-" + strconv.FormatUint(id.seq, 10)
}

func (id streamID) compare(other streamID) int {
	if c := cmp.Compare(id.ms, other.ms); c != 0 {
		return c
	}
	return cmp.Compare(id.seq, other.seq)
}

// next is the smallest id after id. The largest id has none and is returned
// unchanged, which keeps one entry more than needed.
func (id streamID) next() streamID {
	switch {
	case id.seq < math.MaxUint64:
		return streamID{ms: id.ms, seq: id.seq + 1}
	case id.ms < math.MaxUint64:
		return streamID{ms: id.ms + 1}
	default:
		return id
	}
}
