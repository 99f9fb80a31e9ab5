package kafka

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/dispatch-webhooks/dispatch/ports"
)

var _ ports.StreamLag = (*Queue)(nil)

// Lag implements ports.StreamLag from the group's committed offsets: every
// entry past a partition's committed offset (its start if the group never
// committed) is not finished. Of those, the entries this process holds
// unacknowledged are Pending; the rest, including entries other processes
// hold, are Unread. Three admin requests; no record is read.
func (q *Queue) Lag(ctx context.Context, stream, group string) (ports.GroupLag, error) {
	topic := q.topic(stream)
	notDone, err := q.notDone(ctx, topic, q.group(stream, group), nil)
	if err != nil || len(notDone) == 0 {
		return ports.GroupLag{}, err
	}
	var total, pending, acked int64
	for _, n := range notDone {
		total += n
	}
	if m, _ := q.member(stream, group, false); m != nil {
		m.mu.Lock()
		for _, p := range m.parts {
			for _, h := range p.out {
				if h.acked {
					acked++
				} else {
					pending++
				}
			}
		}
		m.mu.Unlock()
	}
	return ports.GroupLag{Unread: max(total-pending-acked, 0), Pending: pending}, nil
}

// notDone counts, per partition of topic, the entries past group's
// committed offset, or past the partition's start where the group has none.
// A missing topic has no partitions. When only is not nil, only its
// partitions are counted, from the offsets it gives where they are >= 0.
func (q *Queue) notDone(ctx context.Context, topic, group string, only map[int32]int64) (map[int32]int64, error) {
	ends, err := q.admin.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if errors.Is(err, kerr.UnknownTopicOrPartition) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("end offsets of %s: %w", topic, err)
	}
	var committed kadm.OffsetResponses
	needCommitted := only == nil
	for _, next := range only {
		needCommitted = needCommitted || next < 0
	}
	if needCommitted {
		committed, err = q.admin.FetchOffsets(ctx, group)
		if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
			return nil, fmt.Errorf("offsets of %s: %w", group, err)
		}
	}
	var starts kadm.ListedOffsets
	out := map[int32]int64{}
	var failed error
	ends.Each(func(end kadm.ListedOffset) {
		p := end.Partition
		next, counted := only[p]
		if only != nil && !counted {
			return
		}
		if next < 0 || only == nil {
			next = -1
			if c, ok := committed.Lookup(topic, p); ok && c.Err == nil && c.At >= 0 {
				next = c.At
			}
		}
		if next < 0 {
			if starts == nil {
				starts, failed = q.admin.ListStartOffsets(ctx, topic)
			}
			if s, ok := starts.Lookup(topic, p); ok && s.Err == nil {
				next = s.Offset
			}
		}
		out[p] = max(end.Offset-next, 0)
	})
	if failed != nil {
		return nil, fmt.Errorf("start offsets of %s: %w", topic, failed)
	}
	return out, nil
}

// unread counts the entries in this member's partitions that it has not
// handed out yet, whether fetched or not.
func (m *member) unread(ctx context.Context) (int64, error) {
	m.mu.Lock()
	only := make(map[int32]int64, len(m.parts))
	for pn, p := range m.parts {
		only[pn] = p.next
	}
	m.mu.Unlock()
	if len(only) == 0 {
		return 0, nil
	}
	counts, err := m.q.notDone(ctx, m.topic, m.group, only)
	var n int64
	for _, c := range counts {
		n += c
	}
	return n, err
}
