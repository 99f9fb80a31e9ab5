package postgres

import (
	"context"
	"fmt"

	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

var (
	_ ports.Backlog = (*Store)(nil)
	_ ports.Storage = (*Store)(nil)
)

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

// TableUsage implements ports.Storage with one statement over the
// catalog: rows as the planner estimates them (0 until a table was first
// analyzed), bytes with indexes and TOAST.
func (s *Store) TableUsage(ctx context.Context) ([]ports.TableUsage, error) {
	rows, err := s.queries.TableUsage(ctx)
	if err != nil {
		return nil, fmt.Errorf("read table usage: %w", interpretError(err))
	}
	out := make([]ports.TableUsage, len(rows))
	for i, r := range rows {
		out[i] = ports.TableUsage{Table: r.Name, Rows: r.Rows, Bytes: r.Bytes}
	}
	return out, nil
}
