package postgres

import (
	"context"
	"fmt"

	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

var _ ports.Backlog = (*Store)(nil)

// UndeliveredCounts implements ports.Backlog.
func (s *Store) UndeliveredCounts(ctx context.Context) (map[domain.DeliveryStatus]int64, error) {
	rows, err := s.queries.UndeliveredCounts(ctx)
	if err != nil {
		return nil, fmt.Errorf("count undelivered deliveries: %w", interpretError(err))
	}
	out := make(map[domain.DeliveryStatus]int64, len(rows))
	for _, r := range rows {
		out[domain.DeliveryStatus(r.Status)] = r.N
	}
	return out, nil
}
