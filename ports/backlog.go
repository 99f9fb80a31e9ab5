package ports

import (
	"context"

	"github.com/dispatch-webhooks/dispatch/domain"
)

// Backlog tells operators how much delivery work is outstanding, for the
// dispatch_pending_deliveries and dispatch_dead_letters gauges.
type Backlog interface {
	// UndeliveredCounts counts deliveries by status, for every status but
	// delivered (pending, delivering, retrying, dead). A status with no
	// delivery may be missing from the map. It reads an index, but its cost
	// grows with the number of undelivered deliveries: call it every few
	// seconds, not per request.
	UndeliveredCounts(ctx context.Context) (map[domain.DeliveryStatus]int64, error)
}

// StreamLag tells how far a consumer group is behind: for the
// dispatch_stream_lag gauge, and for the fan-out stage, which holds back
// while the workers have much of the delivery stream still to read.
type StreamLag interface {
	// Lag returns the entries of stream that group has not finished: those
	// it has not read yet and those read but not acknowledged. A group that
	// does not exist yet has every entry of the stream unread; a stream that
	// does not exist has none.
	Lag(ctx context.Context, stream, group string) (GroupLag, error)
}

// GroupLag is how far a consumer group is behind on a stream.
type GroupLag struct {
	// Unread counts the entries no consumer of the group has read yet.
	Unread int64
	// Pending counts the entries read but not acknowledged yet.
	Pending int64
}

// Total is every entry the group has not finished.
func (l GroupLag) Total() int64 { return l.Unread + l.Pending }

// Storage tells operators what the store keeps, for the
// dispatch_retained_rows and dispatch_table_bytes gauges.
type Storage interface {
	// TableUsage returns, for each table of the delivery history (events,
	// deliveries, attempts), its rows and the bytes it takes on disk with
	// its indexes. Rows may be an estimate (a planner statistic): cheap
	// enough to call every few seconds.
	TableUsage(ctx context.Context) ([]TableUsage, error)
}

// TableUsage is what one table keeps.
type TableUsage struct {
	Table string
	Rows  int64
	Bytes int64
}
