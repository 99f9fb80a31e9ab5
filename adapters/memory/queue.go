package memory

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dispatch-webhooks/dispatch/ports"
)

var _ ports.Queue = (*Queue)(nil)

// defaultQueueReclaimCount mirrors XAUTOCLAIM's default COUNT.
const defaultQueueReclaimCount = 100

// QueueOptions configures a memory Queue. The zero value is valid.
type QueueOptions struct {
	// Now is the clock idle times (Reclaim's minIdle) and entry ids come
	// from; nil means time.Now. Tests pass a fake clock to make entries idle
	// without waiting. Read's block always waits in real time.
	Now func() time.Time
	// MaxLen, when above 0, caps each stream at this many entries, dropping
	// the oldest whether or not a group has read them, like the Redis
	// adapter's opt-in MAXLEN (exactly here, approximately there). Dropped
	// entries still pending are acknowledged by Reclaim. 0, the default,
	// leaves streams to Trim, which drops only what every group is done with.
	MaxLen int
}

// Queue is ports.Queue in process, modelled on Redis Streams so that code
// tested against it behaves the same on Redis: entries get "<ms>-<seq>" ids,
// groups start at the stream's beginning, each group keeps a pending list
// per entry (consumer, delivery time), Reclaim transfers idle entries and
// Trim drops the oldest entries every group is done with.
// One mutex guards everything. Safe for concurrent use.
type Queue struct {
	now    func() time.Time
	maxLen int

	mu      sync.Mutex
	streams map[string]*queueStream
	// published is closed and replaced by every Publish: closing a channel
	// wakes every blocked Read at once without tracking them.
	published chan struct{}
}

// NewQueue returns an empty Queue.
func NewQueue(opts QueueOptions) *Queue {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Queue{
		now:       opts.Now,
		maxLen:    max(opts.MaxLen, 0),
		streams:   make(map[string]*queueStream),
		published: make(chan struct{}),
	}
}

// queueEntryID is a stream entry id, ordered like Redis's.
type queueEntryID struct{ ms, seq uint64 }

func (id queueEntryID) String() string {
	return strconv.FormatUint(id.ms, 10) + "-" + strconv.FormatUint(id.seq, 10)
}

// next is the smallest id after id; the largest id has none and is
// returned unchanged, which keeps one entry more than needed.
func (id queueEntryID) next() queueEntryID {
	switch {
	case id.seq < math.MaxUint64:
		return queueEntryID{ms: id.ms, seq: id.seq + 1}
	case id.ms < math.MaxUint64:
		return queueEntryID{ms: id.ms + 1}
	default:
		return id
	}
}

func compareQueueEntryIDs(a, b queueEntryID) int {
	if c := cmp.Compare(a.ms, b.ms); c != 0 {
		return c
	}
	return cmp.Compare(a.seq, b.seq)
}

// parseQueueEntryID accepts what Redis accepts: "<ms>-<seq>" or "<ms>".
func parseQueueEntryID(s string) (queueEntryID, error) {
	msPart, seqPart, hasSeq := strings.Cut(s, "-")
	ms, err := strconv.ParseUint(msPart, 10, 64)
	if err != nil {
		return queueEntryID{}, fmt.Errorf("memory queue: invalid entry id %q", s)
	}
	var seq uint64
	if hasSeq {
		if seq, err = strconv.ParseUint(seqPart, 10, 64); err != nil {
			return queueEntryID{}, fmt.Errorf("memory queue: invalid entry id %q", s)
		}
	}
	return queueEntryID{ms: ms, seq: seq}, nil
}

type queueEntry struct {
	id        queueEntryID
	key, body string
}

type queueStream struct {
	entries []queueEntry // ascending ids; the oldest may have been trimmed
	lastID  queueEntryID
	groups  map[string]*queueGroup
}

// entry finds an entry by id; false if it was trimmed (or never existed).
func (s *queueStream) entry(id queueEntryID) (queueEntry, bool) {
	i, ok := slices.BinarySearchFunc(s.entries, id, func(e queueEntry, id queueEntryID) int {
		return compareQueueEntryIDs(e.id, id)
	})
	if !ok {
		return queueEntry{}, false
	}
	return s.entries[i], true
}

type queueGroup struct {
	lastDelivered queueEntryID
	pending       map[queueEntryID]*queuePending
	// order lists pending ids ascending, as Redis walks its pending list.
	// Acknowledged ids are removed from pending only and skipped here, and
	// order is compacted once it is mostly such leftovers.
	order []queueEntryID
}

type queuePending struct {
	consumer    string
	deliveredAt time.Time
}

func (g *queueGroup) compact() {
	if len(g.order) < 64 || len(g.order) < 2*len(g.pending) {
		return
	}
	g.order = slices.DeleteFunc(g.order, func(id queueEntryID) bool {
		_, ok := g.pending[id]
		return !ok
	})
}

func (q *Queue) streamLocked(name string) *queueStream {
	s, ok := q.streams[name]
	if !ok {
		s = &queueStream{groups: make(map[string]*queueGroup)}
		q.streams[name] = s
	}
	return s
}

// Publish appends entries to stream, all under one lock so that they get
// consecutive ids, and wakes blocked readers. A stream is one partition:
// it keeps the order of every key.
func (q *Queue) Publish(ctx context.Context, stream string, entries ...ports.Entry) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(entries) == 0 {
		return nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	s := q.streamLocked(stream)
	ms := uint64(max(q.now().UnixMilli(), 0))
	for _, e := range entries {
		// Like Redis: the clock's millisecond, or the last id's plus one in
		// sequence when the clock has not moved past it.
		id := queueEntryID{ms: ms}
		if compareQueueEntryIDs(id, s.lastID) <= 0 {
			id = queueEntryID{ms: s.lastID.ms, seq: s.lastID.seq + 1}
		}
		s.entries = append(s.entries, queueEntry{id: id, key: e.Key, body: e.Body})
		s.lastID = id
	}
	if q.maxLen > 0 && len(s.entries) > q.maxLen {
		// Reslicing leaves the dropped head to be freed when append next
		// reallocates, which copies only the live entries.
		s.entries = s.entries[len(s.entries)-q.maxLen:]
	}
	close(q.published)
	q.published = make(chan struct{})
	return nil
}

// Read hands out entries the group has not delivered yet, waiting for a
// Publish (in real time) when there are none.
func (q *Queue) Read(ctx context.Context, stream, group, consumer string, count int, block time.Duration) ([]ports.Message, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var expired <-chan time.Time
	for {
		q.mu.Lock()
		msgs := q.readLocked(stream, group, consumer, count)
		published := q.published
		q.mu.Unlock()
		if len(msgs) > 0 || block <= 0 {
			return msgs, nil
		}
		if expired == nil {
			timer := time.NewTimer(block)
			defer timer.Stop()
			expired = timer.C
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-expired:
			return []ports.Message{}, nil
		case <-published:
		}
	}
}

func (q *Queue) readLocked(stream, groupName, consumer string, count int) []ports.Message {
	s := q.streamLocked(stream)
	g, ok := s.groups[groupName]
	if !ok {
		g = &queueGroup{pending: make(map[queueEntryID]*queuePending)}
		s.groups[groupName] = g
	}
	// First entry after the group's last delivered one.
	i, _ := slices.BinarySearchFunc(s.entries, g.lastDelivered, func(e queueEntry, id queueEntryID) int {
		if compareQueueEntryIDs(e.id, id) <= 0 {
			return -1
		}
		return 1
	})
	n := len(s.entries) - i
	if count > 0 {
		n = min(n, count)
	}
	msgs := make([]ports.Message, 0, n)
	now := q.now()
	for _, e := range s.entries[i : i+n] {
		g.pending[e.id] = &queuePending{consumer: consumer, deliveredAt: now}
		g.order = append(g.order, e.id)
		g.lastDelivered = e.id
		msgs = append(msgs, ports.Message{ID: e.id.String(), Key: e.key, Body: e.body})
	}
	return msgs
}

// Ack removes ids from the group's pending list. Like XACK, ids that are not
// pending are ignored; a malformed id is an error.
func (q *Queue) Ack(ctx context.Context, stream, group string, ids ...string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(ids) == 0 {
		return nil
	}
	parsed := make([]queueEntryID, len(ids))
	for i, raw := range ids {
		id, err := parseQueueEntryID(raw)
		if err != nil {
			return err
		}
		parsed[i] = id
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	s, ok := q.streams[stream]
	if !ok {
		return nil
	}
	g, ok := s.groups[group]
	if !ok {
		return nil
	}
	for _, id := range parsed {
		delete(g.pending, id)
	}
	g.compact()
	return nil
}

// Reclaim walks the group's pending list in id order, like XAUTOCLAIM,
// transferring to consumer the entries idle for at least minIdle by the
// queue's clock.
func (q *Queue) Reclaim(ctx context.Context, stream, group, consumer string, minIdle time.Duration, count int) ([]ports.Message, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if count <= 0 {
		count = defaultQueueReclaimCount
	}
	msgs := []ports.Message{}
	q.mu.Lock()
	defer q.mu.Unlock()
	s, ok := q.streams[stream]
	if !ok {
		return msgs, nil
	}
	g, ok := s.groups[group]
	if !ok {
		return msgs, nil
	}
	now := q.now()
	for _, id := range g.order {
		p, ok := g.pending[id]
		if !ok || now.Sub(p.deliveredAt) < minIdle {
			continue
		}
		e, ok := s.entry(id)
		if !ok {
			delete(g.pending, id) // trimmed: nothing left to deliver
			continue
		}
		p.consumer = consumer
		p.deliveredAt = now
		msgs = append(msgs, ports.Message{ID: id.String(), Key: e.key, Body: e.body})
		if len(msgs) == count {
			break
		}
	}
	g.compact()
	return msgs, nil
}

// Trim drops the entries before the oldest one some group still needs: its
// oldest pending entry or, with nothing pending, the entry after its last
// delivered one. It trims exactly, as the Redis adapter does, so a group
// that has read nothing keeps the whole stream and a stream without groups
// is left alone.
func (q *Queue) Trim(ctx context.Context, stream string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	s, ok := q.streams[stream]
	if !ok || len(s.groups) == 0 {
		return nil
	}
	minID := queueEntryID{ms: math.MaxUint64, seq: math.MaxUint64}
	for _, g := range s.groups {
		need := g.lastDelivered.next()
		// order is ascending: its first id still pending is the oldest.
		for _, id := range g.order {
			if _, ok := g.pending[id]; ok {
				need = id
				break
			}
		}
		if compareQueueEntryIDs(need, minID) < 0 {
			minID = need
		}
	}
	i, _ := slices.BinarySearchFunc(s.entries, minID, func(e queueEntry, id queueEntryID) int {
		return compareQueueEntryIDs(e.id, id)
	})
	if i > 0 {
		// A copy, not a reslice: a stream trimmed on every tick would
		// otherwise keep its history reachable until append reallocates.
		s.entries = slices.Clone(s.entries[i:])
	}
	return nil
}

// Ping always succeeds: the queue lives in this process.
func (q *Queue) Ping(context.Context) error { return nil }
