package redis

import (
	"context"
	"strconv"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatch-webhooks/dispatch/adapters/redis/redistest"
	"github.com/dispatch-webhooks/dispatch/ports"
	"github.com/dispatch-webhooks/dispatch/ports/protectiontest"
	"github.com/dispatch-webhooks/dispatch/ports/queuetest"
)

// clusterQueue is a Queue with the production options on the test binary's
// 3-master Redis Cluster, under a prefix of t's own.
func clusterQueue(t testing.TB) *Queue {
	t.Helper()
	opts := DefaultQueueOptions()
	opts.Prefix = redistest.ClusterPrefix(t)
	return newTestQueue(t, redistest.ClusterClient(t), opts)
}

// TestQueueOnCluster runs the contract suite on a real 3-master Redis
// Cluster: every command and transaction must stay within one slot.
func TestQueueOnCluster(t *testing.T) {
	queuetest.Run(t, func(t *testing.T) ports.Queue { return clusterQueue(t) }, queuetest.Features{
		DropEntryData: func(t *testing.T, q ports.Queue, stream, id string) {
			q.(*Queue).dropEntry(t, stream, id)
		},
	})
}

func TestQueueLagOnCluster(t *testing.T) {
	t.Parallel()
	queuetest.RunLag(t, func(t *testing.T) queuetest.LagQueue { return clusterQueue(t) })
}

// TestProtectionOnCluster runs the protection suite on the cluster: each
// script's keys share the hash tag {sub:<id>}.
func TestProtectionOnCluster(t *testing.T) {
	protectiontest.RunProtection(t, func(t *testing.T) ports.Protection {
		return protectionSet(redistest.ClusterClient(t), redistest.ClusterPrefix(t))
	}, protectiontest.Features{RateBurst: RateBurst})
}

// TestQueuePartitionsSpreadOverClusterMasters publishes entries of many
// keys and checks that every master holds some of the partitions.
func TestQueuePartitionsSpreadOverClusterMasters(t *testing.T) {
	t.Parallel()
	q := clusterQueue(t)
	ctx := t.Context()
	var entries []ports.Entry
	for i := range 200 {
		entries = append(entries, ports.Entry{Key: "sub_" + strconv.Itoa(i), Body: strconv.Itoa(i)})
	}
	require.NoError(t, q.Publish(ctx, ports.DeliveryStream, entries...))

	perNode := map[string]int64{}
	for _, addr := range redistest.SharedCluster(t).Addrs {
		node := redistest.NodeClient(t, addr)
		keys, err := scanKeys(ctx, node, q.prefix)
		require.NoError(t, err)
		for _, key := range keys {
			n, err := node.XLen(ctx, key).Result()
			require.NoError(t, err)
			perNode[addr] += n
		}
	}
	t.Logf("delivery-stream entries per master: %v", perNode)
	var total int64
	for _, addr := range redistest.SharedCluster(t).Addrs {
		assert.Positive(t, perNode[addr], "master %s holds no partition", addr)
		total += perNode[addr]
	}
	assert.Equal(t, int64(len(entries)), total)
}

func scanKeys(ctx context.Context, client *goredis.Client, prefix string) ([]string, error) {
	var keys []string
	iter := client.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		if strings.HasPrefix(iter.Val(), prefix) {
			keys = append(keys, iter.Val())
		}
	}
	return keys, iter.Err()
}
