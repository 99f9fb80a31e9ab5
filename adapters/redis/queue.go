package redis

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dispatch-webhooks/dispatch/ports"
)

// Queue defaults.
const (
	// DefaultPrefix starts every key the queue writes.
	DefaultPrefix = "dispatch:"
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

// reclaimPages bounds how many XAUTOCLAIM calls one Reclaim makes, so a huge
// pending list is walked over several Reclaim calls instead of one slow one.
const reclaimPages = 8

// defaultReclaimCount is XAUTOCLAIM's own default COUNT, used when the caller
// asks for count <= 0.
const defaultReclaimCount = 100

// QueueOptions configures a Queue. The zero value is valid and means the
// same as DefaultQueueOptions: default prefix, no MAXLEN cap, default block
// slice.
type QueueOptions struct {
	// Prefix starts every key, so several deployments (or tests) can share
	// one Redis. "" means DefaultPrefix. It must not contain '{' or '}',
	// which would break the hash tag that follows it.
	Prefix string
	// MaxLen, when above 0, caps each stream at about this many entries on
	// every XADD (MAXLEN ~, which Redis applies cheaply, whole macro-nodes
	// at a time). Streams are kept short by Trim, which removes only what
	// every consumer group has acknowledged; MaxLen is an opt-in hard cap on
	// Redis memory for when consumers fall far behind. Unlike Trim it drops
	// the oldest entries whether or not a group has read or acknowledged
	// them, so once the backlog exceeds MaxLen it drops unprocessed work.
	// PostgreSQL holds the state of every event and delivery, and the
	// scheduler's outbox sweep re-enqueues what a stream lost, so a cap
	// costs latency, not data. 0, the default, leaves MAXLEN out.
	MaxLen int64
	// BlockSlice is the longest single server-side BLOCK of a Read; a longer
	// block is waited out in slices. go-redis does not interrupt a blocked
	// command when its context is cancelled, so this bounds how long a
	// cancelled Read keeps waiting (graceful shutdown). Each slice that
	// times out costs an idle consumer one cheap round trip. 0 means
	// DefaultBlockSlice.
	BlockSlice time.Duration
}

// DefaultQueueOptions returns the production defaults: DefaultPrefix,
// DefaultBlockSlice, and no MAXLEN cap (streams are kept short by Trim).
func DefaultQueueOptions() QueueOptions {
	return QueueOptions{Prefix: DefaultPrefix, BlockSlice: DefaultBlockSlice}
}

// Validate reports the first invalid option.
func (o QueueOptions) Validate() error {
	if strings.ContainsAny(o.Prefix, "{}") {
		return fmt.Errorf("redis queue: prefix must not contain '{' or '}', got %q", o.Prefix)
	}
	if o.MaxLen < 0 {
		return fmt.Errorf("redis queue: max length must be >= 0 (0 leaves MAXLEN out), got %d", o.MaxLen)
	}
	if o.BlockSlice < 0 {
		return fmt.Errorf("redis queue: block slice must be >= 0, got %s", o.BlockSlice)
	}
	return nil
}

// Queue is ports.Queue on Redis Streams: one stream per queue stream, read
// through consumer groups (XREADGROUP), acknowledged with XACK, reclaimed
// with XAUTOCLAIM and trimmed with XTRIM MINID. Safe for concurrent use.
type Queue struct {
	client     goredis.UniversalClient
	prefix     string
	maxLen     int64
	blockSlice time.Duration

	// cursors remembers where the last Reclaim of each stream and group
	// stopped, so successive Reclaims walk the whole pending list instead of
	// rescanning its head (XAUTOCLAIM's intended use).
	mu      sync.Mutex
	cursors map[string]string

	// publishers holds the group commit of Publish for each stream key
	// (*batch.Batcher[[]string]). Streams are a fixed, small set
	// (events, deliveries, their partitions), so it is never pruned.
	publishers sync.Map
}

var _ ports.Queue = (*Queue)(nil)

// NewQueue returns a Queue on client. The caller owns client and closes it.
func NewQueue(client goredis.UniversalClient, opts QueueOptions) (*Queue, error) {
	if client == nil {
		return nil, errors.New("redis queue: client is nil")
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	if opts.BlockSlice == 0 {
		opts.BlockSlice = DefaultBlockSlice
	}
	return &Queue{
		client:     client,
		prefix:     opts.Prefix,
		maxLen:     opts.MaxLen,
		blockSlice: opts.BlockSlice,
		cursors:    make(map[string]string),
	}, nil
}

// key is the Redis key of stream: the name is the hash tag, so a stream and
// anything keyed by it share a Cluster slot.
func (q *Queue) key(stream string) string {
	return q.prefix + "{" + stream + "}"
}

// Publish appends bodies to stream. Concurrent Publish calls to one stream
// are group-committed: their XADDs go out as one pipeline, one round trip
// for up to maxPublishCalls callers (see publishBatch), and each call
// returns once its entries were appended, or with the error of the first of
// them that was not. A pipeline on one connection keeps the order, so each
// call's bodies are appended in order and next to each other.
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
	key := q.key(stream)
	// A copy: a caller that gives up may reuse its slice while the pipeline
	// holding it is still being written.
	if err := q.publisher(key).Commit(ctx, slices.Clone(entries)); err != nil {
		if len(entries) == 1 {
			return fmt.Errorf("redis queue: publish to %s: %w", key, err)
		}
		return fmt.Errorf("redis queue: publish %d entries to %s: %w", len(entries), key, err)
	}
	return nil
}

func (q *Queue) xaddArgs(stream string, e ports.Entry) *goredis.XAddArgs {
	values := []string{bodyField, e.Body}
	if e.Key != "" {
		values = append(values, keyField, e.Key)
	}
	return &goredis.XAddArgs{
		Stream: stream,
		MaxLen: q.maxLen, // 0 leaves MAXLEN out
		Approx: true,
		Values: values,
	}
}

// Read reads new entries with XREADGROUP ... BLOCK, creating the group (and
// the stream) on the first NOGROUP reply. The block is waited out in slices
// of at most BlockSlice so that a cancelled ctx is noticed promptly.
func (q *Queue) Read(ctx context.Context, stream, group, consumer string, count int, block time.Duration) ([]ports.Message, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	key := q.key(stream)
	deadline := time.Now().Add(block)
	createdGroup := false
	for {
		slice := -time.Duration(1) // negative: go-redis leaves BLOCK out, no wait
		if remaining := time.Until(deadline); remaining > 0 {
			slice = min(remaining, q.blockSlice)
			if d, ok := ctx.Deadline(); ok {
				// go-redis would turn a ctx deadline inside the BLOCK into a
				// socket timeout and drop the connection; stop short instead.
				slice = min(slice, time.Until(d))
			}
			// BLOCK counts whole milliseconds and BLOCK 0 waits forever.
			slice = max(slice, time.Millisecond)
		}
		streams, err := q.client.XReadGroup(ctx, &goredis.XReadGroupArgs{
			Group:    group,
			Consumer: consumer,
			Streams:  []string{key, ">"},
			Count:    int64(max(count, 0)),
			Block:    slice,
		}).Result()
		switch {
		case err == nil:
			msgs := toMessages(streams)
			if len(msgs) > 0 {
				// Even if ctx ended meanwhile: these entries are now pending
				// for consumer, and handing them over beats leaving them to
				// wait out the visibility timeout.
				return msgs, nil
			}
		case errors.Is(err, goredis.Nil):
			// The block expired with nothing new.
		case isNoGroup(err) && !createdGroup:
			if err := q.createGroup(ctx, key, group); err != nil {
				return nil, err
			}
			createdGroup = true
			continue
		default:
			if ctxErr := ctx.Err(); ctxErr != nil {
				return nil, ctxErr
			}
			return nil, fmt.Errorf("redis queue: read %s as %s/%s: %w", key, group, consumer, interpretError(err))
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if !time.Now().Before(deadline) {
			return []ports.Message{}, nil
		}
	}
}

// createGroup creates group on key reading from the stream's start, and the
// stream if it does not exist yet. Another consumer may win the race; its
// BUSYGROUP reply means the group is there, which is all that matters.
func (q *Queue) createGroup(ctx context.Context, key, group string) error {
	err := q.client.XGroupCreateMkStream(ctx, key, group, "0").Err()
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return fmt.Errorf("redis queue: create group %s on %s: %w", group, key, interpretError(err))
	}
	return nil
}

// isNoGroup reports the reply to reading a group (or stream) that does not
// exist; it also follows a FLUSHALL, after which groups are recreated.
func isNoGroup(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOGROUP")
}

// Ack acknowledges ids with one XACK. XACK ignores ids that are not pending,
// and a missing stream or group acknowledges nothing without an error.
func (q *Queue) Ack(ctx context.Context, stream, group string, ids ...string) error {
	if len(ids) == 0 {
		return nil
	}
	key := q.key(stream)
	if err := q.client.XAck(ctx, key, group, ids...).Err(); err != nil {
		return fmt.Errorf("redis queue: ack %d entries of %s for %s: %w", len(ids), key, group, interpretError(err))
	}
	return nil
}

// Reclaim runs XAUTOCLAIM from where the previous Reclaim of this stream and
// group stopped, for up to reclaimPages pages, until count entries are
// claimed or the pending list has been walked to its end. Entries whose data
// was trimmed (Redis 7 lists them as deleted ids; Redis 6.2 returns them
// with no fields) are acknowledged and skipped.
func (q *Queue) Reclaim(ctx context.Context, stream, group, consumer string, minIdle time.Duration, count int) ([]ports.Message, error) {
	if count <= 0 {
		count = defaultReclaimCount
	}
	key := q.key(stream)
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
		next, claimed, deleted, err := parseAutoclaim(reply)
		if err != nil {
			return nil, fmt.Errorf("redis queue: reclaim %s for %s/%s: %w", key, group, consumer, err)
		}
		for _, c := range claimed {
			if c.trimmed {
				trimmed = append(trimmed, c.msg.ID)
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
	if err := q.Ack(ctx, stream, group, trimmed...); err != nil {
		return nil, err
	}
	return msgs, nil
}

// Trim removes with XTRIM MINID the entries older than the oldest one some
// consumer group still needs. For each group (XINFO GROUPS) that is its
// oldest pending entry (the XPENDING summary's smallest id) or, with nothing
// pending, the entry after its last-delivered-id, so a group that has read
// nothing yet (last-delivered-id 0-0) keeps the whole stream. Redis 7's lag
// is not used: it counts unread entries but not pending ones, and is
// unknown (nil) after some deletions.
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
func (q *Queue) Trim(ctx context.Context, stream string) error {
	key := q.key(stream)
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

// toMessages converts an XREADGROUP reply. An entry without the body field
// (or with a non-string one) comes back with Body "" rather than failing
// the batch, so the application can acknowledge and count it.
func toMessages(streams []goredis.XStream) []ports.Message {
	n := 0
	for _, s := range streams {
		n += len(s.Messages)
	}
	msgs := make([]ports.Message, 0, n)
	for _, s := range streams {
		for _, m := range s.Messages {
			body, _ := m.Values[bodyField].(string)
			key, _ := m.Values[keyField].(string)
			msgs = append(msgs, ports.Message{ID: m.ID, Key: key, Body: body})
		}
	}
	return msgs
}

// claimedEntry is one entry of an XAUTOCLAIM reply.
type claimedEntry struct {
	msg     ports.Message
	trimmed bool // Redis 6.2: the entry is pending but its data is gone
}

// parseAutoclaim reads a raw XAUTOCLAIM reply: [next-cursor, [[id, [field,
// value, ...]] ...], [deleted-id ...]]. go-redis's typed XAutoClaim
// discards the deleted ids, which Reclaim needs, hence the raw command.
// Only a malformed reply is an error; one odd entry never fails the page:
// without the body field it comes back with Body "" (the application
// acknowledges and counts it), and without a readable id it is skipped.
func parseAutoclaim(reply []any) (next string, claimed []claimedEntry, deleted []string, err error) {
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
		claimed = append(claimed, claimedEntry{msg: ports.Message{ID: id, Key: key, Body: body}, trimmed: !present})
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
