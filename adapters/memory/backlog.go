package memory

import (
	"context"

	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

var (
	_ ports.Backlog   = (*Store)(nil)
	_ ports.StreamLag = (*Queue)(nil)
)

// UndeliveredCounts implements ports.Backlog.
func (s *Store) UndeliveredCounts(context.Context) (map[domain.DeliveryStatus]int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[domain.DeliveryStatus]int64{}
	for _, d := range s.deliveries {
		if d.delivery.Status != domain.DeliveryDelivered {
			out[d.delivery.Status]++
		}
	}
	return out, nil
}

// Lag implements ports.StreamLag.
func (q *Queue) Lag(_ context.Context, stream, group string) (ports.GroupLag, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	s, ok := q.streams[stream]
	if !ok {
		return ports.GroupLag{}, nil
	}
	g, ok := s.groups[group]
	if !ok {
		return ports.GroupLag{Unread: int64(len(s.entries))}, nil
	}
	unread := 0
	for i := len(s.entries) - 1; i >= 0 && compareQueueEntryIDs(s.entries[i].id, g.lastDelivered) > 0; i-- {
		unread++
	}
	return ports.GroupLag{Unread: int64(unread), Pending: int64(len(g.pending))}, nil
}
