package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dispatch-webhooks/dispatch/ports"
)

// member is this process's member of one consumer group: one kgo client
// whose partitions every consumer of the group in this process shares, and
// what they hold pending.
type member struct {
	q      *Queue
	topic  string
	group  string
	client *kgo.Client

	// poll lets one Read at a time poll the client.
	poll chan struct{}
	// assigned is closed once the group first gave this member its share.
	assigned     chan struct{}
	assignedOnce sync.Once

	// commitMu orders commits, so a partition's offset never moves back.
	commitMu sync.Mutex

	mu    sync.Mutex
	parts map[int32]*partition
}

// partition is the state of one partition this member owns.
type partition struct {
	// out are the entries handed out and not yet committed, in offset
	// order: the first is the oldest unacknowledged one.
	out []*held
	// next is the offset after the last entry handed out; -1 before the
	// first.
	next int64
	// done is the last entry of the acknowledged prefix, whose offset + 1
	// is to be committed; committed is the offset last committed.
	done      *kgo.Record
	committed int64
}

// held is an entry handed out and not yet committed.
type held struct {
	rec      *kgo.Record
	consumer string
	at       time.Time
	acked    bool
}

// member returns this process's member of group on stream, joining the
// group when create is set; nil when it has not joined and create is not
// set.
func (q *Queue) member(stream, group string, create bool) (*member, error) {
	key := stream + "\x00" + group
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return nil, errors.New("kafka: queue closed")
	}
	if m := q.members[key]; m != nil || !create {
		return m, nil
	}
	m := &member{
		q:        q,
		topic:    q.topic(stream),
		group:    q.group(stream, group),
		poll:     make(chan struct{}, 1),
		assigned: make(chan struct{}),
		parts:    make(map[int32]*partition),
	}
	client, err := kgo.NewClient(
		kgo.SeedBrokers(q.brokers...),
		kgo.ConsumerGroup(m.group),
		kgo.ConsumeTopics(m.topic),
		// A group reads from the topic's start, like a Redis group
		// created at id 0.
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
		kgo.SessionTimeout(q.session),
		kgo.HeartbeatInterval(q.heartbeat),
		kgo.OnPartitionsAssigned(m.onAssigned),
		kgo.OnPartitionsRevoked(m.onRevoked),
		kgo.OnPartitionsLost(m.onLost),
	)
	if err != nil {
		return nil, fmt.Errorf("kafka: join group %s: %w", m.group, err)
	}
	m.client = client
	q.members[key] = m
	return m, nil
}

func (m *member) onAssigned(_ context.Context, _ *kgo.Client, assigned map[string][]int32) {
	m.mu.Lock()
	for _, p := range assigned[m.topic] {
		m.parts[p] = &partition{next: -1}
	}
	m.mu.Unlock()
	m.assignedOnce.Do(func() { close(m.assigned) })
}

// onRevoked commits what is safe of the partitions going away and forgets
// their entries: those unacknowledged go to the partitions' next owner,
// from the committed offset.
func (m *member) onRevoked(ctx context.Context, _ *kgo.Client, revoked map[string][]int32) {
	ctx, cancel := context.WithTimeout(ctx, m.q.session)
	defer cancel()
	_ = m.commit(ctx) // what is not committed is handed out again
	m.onLost(ctx, nil, revoked)
}

// onLost forgets partitions another member may already own: committing
// would be refused.
func (m *member) onLost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range lost[m.topic] {
		delete(m.parts, p)
	}
}

// Read returns entries of stream new to group. This process's consumers
// share its member of the group, so each entry goes to one of them; the
// partitions are shared with the group's other processes. It waits up to
// block for new entries; entries already in a partition this process owns
// are fetched whatever block is (a fetch takes a round trip, and a process
// that just joined its group waits for its partitions first).
func (q *Queue) Read(ctx context.Context, stream, group, consumer string, count int, block time.Duration) ([]ports.Message, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := q.ensureTopic(ctx, q.topic(stream)); err != nil {
		return nil, err
	}
	m, err := q.member(stream, group, true)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(block)
	select {
	case m.poll <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-m.poll }()

	count = max(count, 1)
	msgs, err := m.pollUntil(ctx, consumer, count, deadline)
	if len(msgs) > 0 || err != nil {
		return msgs, err
	}
	// Nothing new came in block: hand out what is already there.
	select {
	case <-m.assigned:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(assignWait):
		return []ports.Message{}, nil
	}
	unread, err := m.unread(ctx)
	if err != nil || unread == 0 {
		return []ports.Message{}, err
	}
	return m.pollUntil(ctx, consumer, count, time.Now().Add(catchUpWait))
}

// pollUntil polls the client until entries come, ctx ends (its error) or
// the deadline passes (an empty slice).
func (m *member) pollUntil(ctx context.Context, consumer string, count int, deadline time.Time) ([]ports.Message, error) {
	// A nil context takes what is buffered without waiting; a done one
	// would not even do that.
	fetches := m.client.PollRecords(nil, count) //nolint:staticcheck // nil is kgo's "do not wait"
	for {
		if msgs := m.hand(consumer, fetches.Records()); len(msgs) > 0 {
			return msgs, nil
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := fetchError(fetches); err != nil {
			return nil, fmt.Errorf("read %s: %w", m.topic, err)
		}
		if !time.Now().Before(deadline) {
			return []ports.Message{}, nil
		}
		pollCtx, cancel := context.WithDeadline(ctx, deadline)
		fetches = m.client.PollRecords(pollCtx, count)
		cancel()
	}
}

// fetchError is the first error of fetches that a caller must hear of:
// not the end of a poll's context, nor an error franz-go retries.
func fetchError(fetches kgo.Fetches) error {
	var first error
	fetches.EachError(func(_ string, _ int32, err error) {
		if first != nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || kerr.IsRetriable(err) {
			return
		}
		first = err
	})
	return first
}

// hand records recs as pending for consumer and returns them as messages;
// records of partitions no longer owned are dropped, as their next owner
// reads them again.
func (m *member) hand(consumer string, recs []*kgo.Record) []ports.Message {
	if len(recs) == 0 {
		return nil
	}
	now := m.q.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	msgs := make([]ports.Message, 0, len(recs))
	for _, r := range recs {
		p := m.parts[r.Partition]
		if p == nil || r.Offset < p.next {
			continue
		}
		p.out = append(p.out, &held{rec: r, consumer: consumer, at: now})
		p.next = r.Offset + 1
		msgs = append(msgs, message(r))
	}
	return msgs
}

// message is the port's view of r; its id is "<partition>-<offset>".
func message(r *kgo.Record) ports.Message {
	return ports.Message{
		ID:   strconv.FormatInt(int64(r.Partition), 10) + "-" + strconv.FormatInt(r.Offset, 10),
		Key:  string(r.Key),
		Body: string(r.Value),
	}
}

// parseID is the partition and offset of a message id; ok is false for an
// id this queue never made.
func parseID(id string) (partition int32, offset int64, ok bool) {
	ps, os, found := strings.Cut(id, "-")
	if !found {
		return 0, 0, false
	}
	p, err1 := strconv.ParseInt(ps, 10, 32)
	o, err2 := strconv.ParseInt(os, 10, 64)
	return int32(p), o, err1 == nil && err2 == nil
}

// find is the held entry of p at offset, or nil.
func (p *partition) find(offset int64) *held {
	i, ok := slices.BinarySearchFunc(p.out, offset, func(h *held, o int64) int {
		switch {
		case h.rec.Offset < o:
			return -1
		case h.rec.Offset > o:
			return 1
		}
		return 0
	})
	if !ok {
		return nil
	}
	return p.out[i]
}

// Ack acknowledges entries and commits, for each partition, the offset
// after its oldest entries that are all acknowledged: an entry left
// unacknowledged holds its partition's offset back. Ids of entries this
// process does not hold (another process's, or of a partition that moved
// away) are ignored.
func (q *Queue) Ack(ctx context.Context, stream, group string, ids ...string) error {
	if len(ids) == 0 {
		return nil
	}
	m, err := q.member(stream, group, false)
	if m == nil || err != nil {
		return nil //nolint:nilerr // nothing of a closed queue is held here
	}
	m.mu.Lock()
	for _, id := range ids {
		pn, offset, ok := parseID(id)
		if !ok {
			continue
		}
		p := m.parts[pn]
		if p == nil {
			continue
		}
		if h := p.find(offset); h != nil {
			h.acked = true
		}
		n := 0
		for n < len(p.out) && p.out[n].acked {
			p.done = p.out[n].rec
			n++
		}
		p.out = p.out[n:]
	}
	m.mu.Unlock()
	if err := m.commit(ctx); err != nil {
		return fmt.Errorf("ack on %s for %s: %w", stream, group, err)
	}
	return nil
}

// commit commits every owned partition's acknowledged prefix not yet
// committed. A commit refused because the group is rebalancing is not an
// error: the entries it stood for go to the partition's next owner.
func (m *member) commit(ctx context.Context) error {
	m.commitMu.Lock()
	defer m.commitMu.Unlock()
	m.mu.Lock()
	var recs []*kgo.Record
	for _, p := range m.parts {
		if p.done != nil && p.done.Offset >= p.committed {
			recs = append(recs, p.done)
		}
	}
	m.mu.Unlock()
	if len(recs) == 0 {
		return nil
	}
	if err := m.client.CommitRecords(ctx, recs...); err != nil {
		if errors.Is(err, kerr.RebalanceInProgress) || errors.Is(err, kerr.IllegalGeneration) || errors.Is(err, kerr.UnknownMemberID) {
			return nil
		}
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range recs {
		if p := m.parts[r.Partition]; p != nil && r.Offset >= p.committed {
			p.committed = r.Offset + 1
		}
	}
	return nil
}

// Reclaim hands to consumer this process's entries of stream that a
// consumer left unacknowledged for minIdle. Entries held by another
// process come back by rebalance instead: when it stops, or its session
// times out, its partitions go to the group's other members, which read
// them again from the committed offset. Kafka keeps records until
// retention drops them, so no pending entry lacks its data.
func (q *Queue) Reclaim(_ context.Context, stream, group, consumer string, minIdle time.Duration, count int) ([]ports.Message, error) {
	m, err := q.member(stream, group, false)
	if m == nil || err != nil {
		return []ports.Message{}, nil //nolint:nilerr // a closed queue holds nothing
	}
	if count <= 0 {
		count = defaultReclaimCount
	}
	now := q.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	pns := make([]int32, 0, len(m.parts))
	for pn := range m.parts {
		pns = append(pns, pn)
	}
	slices.Sort(pns)
	out := []ports.Message{}
	for _, pn := range pns {
		for _, h := range m.parts[pn].out {
			if len(out) == count {
				return out, nil
			}
			if h.acked || now.Sub(h.at) < minIdle {
				continue
			}
			h.consumer, h.at = consumer, now
			out = append(out, message(h.rec))
		}
	}
	return out, nil
}
