package bootstrap_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dispatch-webhooks/dispatch/adapters/redis/redistest"
	"github.com/dispatch-webhooks/dispatch/bootstrap"
	"github.com/dispatch-webhooks/dispatch/client"
)

// TestRedisClusterLosesNothing runs Dispatch on a real 3-master Redis
// Cluster (DISPATCH_REDIS_CLUSTER) with two worker processes, delivers
// events of many subscriptions, FLUSHALLs one master and SIGKILLs a worker
// mid-run, and checks that every event is still delivered. The delivery
// stream's partitions must spread over the masters: each one must have
// taken XADDs.
func TestRedisClusterLosesNothing(t *testing.T) {
	t.Parallel()
	rc := redistest.SharedCluster(t)
	masters := make(map[string]func() int64, len(rc.Addrs))
	before := map[string]int64{}
	for _, addr := range rc.Addrs {
		node := redistest.NodeClient(t, addr)
		masters[addr] = func() int64 { return xaddCalls(t, node.Info(context.Background(), "commandstats").Val()) }
		before[addr] = masters[addr]()
	}

	c := newCluster(t, func(cfg *bootstrap.Config) {
		cfg.Queue = bootstrap.QueueRedis
		cfg.RedisURL, cfg.RedisCluster = rc.URL(), true
		cfg.RedisKeyPrefix = redistest.ClusterPrefix(t)
		cfg.WorkerConcurrency = 4 // a modest worker, so work piles up
	})
	rcv := newScripted(t)
	ep, hook := rcv.add("/cluster", takesAMoment(5*time.Millisecond))
	const subscriptions = 48
	for i := range subscriptions {
		c.subscribe(hook, "cluster.event"+strconv.Itoa(i), client.SubscriptionInput{RetryPolicy: fastRetries})
	}

	// Every event is accepted before the workers start, so that the flush
	// finds most of the work queued in the streams.
	const n = 300
	ids := make([]string, n)
	var published sync.WaitGroup
	next := make(chan int)
	for range 4 {
		published.Go(func() {
			for i := range next {
				ids[i] = c.publish("cluster.event"+strconv.Itoa(i%subscriptions), fmt.Sprintf(`{"i":%d}`, i))
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	published.Wait()

	c.start(bootstrap.RoleScheduler)
	victim := c.startProcess(bootstrap.RoleWorker)
	c.startProcess(bootstrap.RoleWorker)
	waitFor(t, 30*time.Second, "the first 50 deliveries", func() bool { return len(ep.got()) >= 50 })
	flushed := rc.Addrs[0]
	if err := redistest.NodeClient(t, flushed).FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	if err := victim.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = victim.Wait()
	t.Logf("flushed master %s and killed a worker with %d of %d events delivered", flushed, len(ep.got()), n)
	c.startProcess(bootstrap.RoleWorker)
	waitAllArrived(t, ep, ids, 60*time.Second)

	var shares []string
	var total int64
	calls := map[string]int64{}
	for _, addr := range rc.Addrs {
		calls[addr] = masters[addr]() - before[addr]
		total += calls[addr]
	}
	for _, addr := range rc.Addrs {
		shares = append(shares, fmt.Sprintf("%s %d (%.0f%%)", addr, calls[addr], 100*float64(calls[addr])/float64(max(total, 1))))
		if calls[addr] == 0 {
			t.Errorf("master %s took no XADD: the partitions did not spread", addr)
		}
	}
	// Events are fanned out inline at ingest (one subscription each), so
	// the XADDs are delivery-stream entries, the recovered ones included.
	t.Logf("stream XADDs per master: %s", strings.Join(shares, ", "))
}

// xaddCalls reads calls of cmdstat_xadd from INFO commandstats.
func xaddCalls(t *testing.T, info string) int64 {
	t.Helper()
	for line := range strings.SplitSeq(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_xadd:calls=")
		if !ok {
			continue
		}
		calls, _, _ := strings.Cut(rest, ",")
		n, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			t.Fatalf("INFO commandstats: %q: %v", line, err)
		}
		return n
	}
	return 0
}
