package redis

import (
	"context"
	"fmt"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dispatch-webhooks/dispatch/ports"
)

var _ ports.StreamLag = (*Queue)(nil)

// Lag implements ports.StreamLag: the sum over the partitions of stream of
// the group's lag (entries not yet read) and pending count, from XINFO
// GROUPS, one pipeline for every partition. Redis reports no lag when it
// cannot tell (after some trims or deletions); then the entries after the
// group's last-delivered id are counted with XRANGE … COUNT, capped, so a
// call stays cheap. In a partition where the group does not exist yet
// every entry is unread (XLEN).
func (q *Queue) Lag(ctx context.Context, stream, group string) (ports.GroupLag, error) {
	keys := q.partitionKeys(stream)
	infos := make([]*goredis.XInfoGroupsCmd, len(keys))
	pipe := q.client.Pipeline()
	for n, key := range keys {
		infos[n] = pipe.XInfoGroups(ctx, key)
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error

	var total ports.GroupLag
	for n, key := range keys {
		lag, err := q.partitionLag(ctx, key, group, infos[n])
		if err != nil {
			return ports.GroupLag{}, fmt.Errorf("lag of %s/%s: %w", stream, group, interpretError(err))
		}
		total.Unread += lag.Unread
		total.Pending += lag.Pending
	}
	return total, nil
}

// partitionLag is the lag of group on the stream at key, given its XINFO
// GROUPS reply.
func (q *Queue) partitionLag(ctx context.Context, key, group string, info *goredis.XInfoGroupsCmd) (ports.GroupLag, error) {
	groups, err := info.Result()
	if err != nil {
		if strings.Contains(err.Error(), "no such key") {
			return ports.GroupLag{}, nil
		}
		return ports.GroupLag{}, err
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
			return ports.GroupLag{}, err
		}
		return ports.GroupLag{Unread: int64(len(unread)), Pending: g.Pending}, nil
	}
	n, err := q.client.XLen(ctx, key).Result()
	if err != nil {
		return ports.GroupLag{}, err
	}
	return ports.GroupLag{Unread: n}, nil
}

// lagScanCap bounds the fallback count of unread entries of a partition.
const lagScanCap = 100_000
