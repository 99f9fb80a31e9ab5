package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/dispatch-webhooks/dispatch/ports"
)

var _ ports.StreamLag = (*Queue)(nil)

// Lag implements ports.StreamLag with XINFO GROUPS: the group's lag (entries
// not yet read) and its pending count. Redis reports no lag when it cannot
// tell (after some trims or deletions); then the entries after the group's
// last-delivered id are counted with XRANGE … COUNT, capped, so a call stays
// cheap.
func (q *Queue) Lag(ctx context.Context, stream, group string) (ports.GroupLag, error) {
	key := q.key(stream)
	groups, err := q.client.XInfoGroups(ctx, key).Result()
	if err != nil {
		if strings.Contains(err.Error(), "no such key") {
			return ports.GroupLag{}, nil
		}
		return ports.GroupLag{}, fmt.Errorf("lag of %s/%s: %w", stream, group, err)
	}
	for _, g := range groups {
		if g.Name != group {
			continue
		}
		if g.Lag >= 0 && g.EntriesRead > 0 {
			return ports.GroupLag{Unread: g.Lag, Pending: g.Pending}, nil
		}
		unread, err := q.client.XRangeN(ctx, key, "("+g.LastDeliveredID, "+", lagScanCap).Result()
		if err != nil {
			return ports.GroupLag{}, fmt.Errorf("lag of %s/%s: %w", stream, group, err)
		}
		return ports.GroupLag{Unread: int64(len(unread)), Pending: g.Pending}, nil
	}
	n, err := q.client.XLen(ctx, key).Result()
	if err != nil && !errors.Is(err, context.Canceled) {
		return ports.GroupLag{}, fmt.Errorf("lag of %s/%s: %w", stream, group, err)
	}
	return ports.GroupLag{Unread: n}, err
}

// lagScanCap bounds the fallback count of unread entries.
const lagScanCap = 100_000
