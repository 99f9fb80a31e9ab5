package bootstrap_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/fx"

	"github.com/dispatch-webhooks/dispatch/adapters/redis/redistest"
	"github.com/dispatch-webhooks/dispatch/bootstrap"
	"github.com/dispatch-webhooks/dispatch/client"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// countArrivals reports which of the want event ids were never delivered
// (answered 2xx to a sender still listening) and how many deliveries were
// duplicates.
func countArrivals(got []arrival, want []string) (missing []string, duplicates int) {
	seen := map[string]int{}
	for _, a := range got {
		if a.status/100 == 2 && !a.aborted {
			seen[a.webhookID]++
		}
	}
	for _, id := range want {
		switch n := seen[id]; {
		case n == 0:
			missing = append(missing, id)
		case n > 1:
			duplicates += n - 1
		}
	}
	return missing, duplicates
}

// waitAllArrived waits until every event reached ep at least once and logs
// the duplicate count (at-least-once delivery allows duplicates; losses
// fail the test).
func waitAllArrived(t *testing.T, ep *endpoint, ids []string, timeout time.Duration) {
	t.Helper()
	var missing []string
	var duplicates int
	waitFor(t, timeout, fmt.Sprintf("all %d events to arrive", len(ids)), func() bool {
		missing, duplicates = countArrivals(ep.got(), ids)
		return len(missing) == 0
	})
	t.Logf("all %d (event, subscription) pairs arrived; %d duplicate requests", len(ids), duplicates)
}

var (
	binaryOnce sync.Once
	binaryPath string
	binaryErr  error
)

// TestMain removes the binary dispatchBinary built, if it built one, and
// stops the Redis Cluster the cluster tests share.
func TestMain(m *testing.M) {
	code := m.Run()
	redistest.StopSharedCluster()
	if binaryPath != "" {
		_ = os.RemoveAll(filepath.Dir(binaryPath))
	}
	os.Exit(code)
}

// dispatchBinary builds bootstrap/cmd/dispatch once per test run.
func dispatchBinary(t *testing.T) string {
	t.Helper()
	binaryOnce.Do(func() {
		dir, err := os.MkdirTemp("", "dispatch-bin-")
		if err != nil {
			binaryErr = err
			return
		}
		binaryPath = filepath.Join(dir, "dispatch")
		gobin, err := exec.LookPath("go")
		if err != nil {
			binaryErr = err
			return
		}
		out, err := exec.Command(gobin, "build", "-o", binaryPath, "./cmd/dispatch").CombinedOutput()
		if err != nil {
			binaryErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binaryErr != nil {
		t.Fatal(binaryErr)
	}
	return binaryPath
}

// startProcess runs `dispatch <role>` against the cluster's backends.
func (c *cluster) startProcess(role bootstrap.Role) *exec.Cmd {
	c.t.Helper()
	cmd := exec.Command(dispatchBinary(c.t), string(role))
	cmd.Env = append(append(os.Environ(), queueEnv(c.cfg)...),
		"DATABASE_URL="+c.cfg.DatabaseURL,
		"REDIS_URL="+c.cfg.RedisURL,
		"DISPATCH_REDIS_KEY_PREFIX="+c.cfg.RedisKeyPrefix,
		"DISPATCH_REDIS_CLUSTER="+strconv.FormatBool(c.cfg.RedisCluster),
		"DISPATCH_ALLOW_PRIVATE_TARGETS=true",
		"DISPATCH_VISIBILITY_TIMEOUT="+c.cfg.VisibilityTimeout.String(),
		"DISPATCH_WORKER_CONCURRENCY="+fmt.Sprint(c.cfg.WorkerConcurrency),
		"DISPATCH_LOG_LEVEL=error",
	)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("start %s: %v", role, err)
	}
	c.t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		if c.t.Failed() && stderr.Len() > 0 {
			c.t.Logf("%s process stderr:\n%s", role, stderr.String())
		}
	})
	return cmd
}

// TestKilledWorkerEntriesAreDeliveredByAnother SIGKILLs a worker process
// while it holds unacknowledged entries and requests in flight; another
// worker delivers everything after the visibility timeout and the lease.
func TestKilledWorkerEntriesAreDeliveredByAnother(t *testing.T) {
	t.Parallel()
	c := newCluster(t, func(cfg *bootstrap.Config) { cfg.WorkerConcurrency = 8 })
	killWorkerMidAttempt(t, c, 10, nil)
}

// TestKilledWorkerTakenDeliveriesComeBack SIGKILLs a worker while it
// attempts deliveries it took under their creator's reservation, so no
// lease was written: they read as pending, and once the reservation (the
// visibility timeout) has passed another worker delivers them. A 2 s
// timeout and the 5 s lease margin fit in the 10 s reservation for 3 s
// after a delivery's creation: its fresh entry's holder takes it.
func TestKilledWorkerTakenDeliveriesComeBack(t *testing.T) {
	t.Parallel()
	c := newCluster(t, func(cfg *bootstrap.Config) {
		cfg.WorkerConcurrency = 8
		cfg.VisibilityTimeout = 10 * time.Second
	})
	killWorkerMidAttempt(t, c, 4, func(ids []string) {
		for _, id := range ids {
			for _, d := range deref(c.getEvent(id).Deliveries) {
				if d.Status != client.DeliverySummaryStatusPending {
					t.Errorf("delivery %s is %s while its request is in flight, want pending: taken, not claimed", d.Id, d.Status)
				}
			}
		}
	})
}

// killWorkerMidAttempt runs a scheduler and a worker process of c (whose
// WorkerConcurrency is 8, of which the one subscription may hold half: four
// requests), publishes n events to an endpoint (2 s timeout)
// that holds every request, SIGKILLs the worker once four requests are in
// flight (after calling inFlight, if set, with the event ids), and checks
// that a new worker delivers every event.
func killWorkerMidAttempt(t *testing.T, c *cluster, n int, inFlight func(ids []string)) {
	t.Helper()
	c.start(bootstrap.RoleScheduler)
	rcv := newScripted(t)
	release := make(chan struct{})
	ep, url := rcv.add("/held", func(_ int, r *http.Request) (int, http.Header) {
		select {
		case <-release:
		case <-r.Context().Done(): // the worker died
		}
		return http.StatusOK, nil
	})
	c.subscribe(url, "job.ready", client.SubscriptionInput{Timeout: new("2s"), RetryPolicy: fastRetries})

	victim := c.startProcess(bootstrap.RoleWorker)
	var ids []string
	for i := range n {
		ids = append(ids, c.publish("job.ready", fmt.Sprintf(`{"i":%d}`, i)))
	}
	waitFor(t, 15*time.Second, "the doomed worker to have requests in flight", func() bool { return len(ep.got()) >= 4 })
	if inFlight != nil {
		inFlight(ids)
	}
	if err := victim.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = victim.Wait()
	close(release)

	c.start(bootstrap.RoleWorker)
	waitAllArrived(t, ep, ids, 30*time.Second)
	for _, id := range ids {
		c.waitEvent(id, "delivered", 15*time.Second)
	}
}

// failingQueue fails every Publish to one stream, as if Redis were down just
// after the PostgreSQL commit.
type failingQueue struct {
	ports.Queue
	stream string
}

func (q failingQueue) Publish(ctx context.Context, stream string, entries ...ports.Entry) error {
	if stream == q.stream {
		return errors.New("injected: redis unavailable")
	}
	return q.Queue.Publish(ctx, stream, entries...)
}

func failPublishTo(stream string) fx.Option {
	return fx.Decorate(func(q ports.Queue) ports.Queue { return failingQueue{Queue: q, stream: stream} })
}

// TestLostAppendsAreRecoveredFromPostgres makes the append after a commit
// fail, at ingest and at fan-out; the scheduler's sweeps deliver anyway.
func TestLostAppendsAreRecoveredFromPostgres(t *testing.T) {
	t.Parallel()
	t.Run("event append lost at ingest", func(t *testing.T) {
		t.Parallel()
		c := newCluster(t, nil)
		var api *bootstrap.APIServer
		startApp(t, bootstrap.RoleAPI, c.cfg, failPublishTo(ports.EventStream), fx.Populate(&api))
		broken := newAPIClient(t, "http://"+api.Addr())
		c.start(bootstrap.RoleWorker)
		c.start(bootstrap.RoleScheduler)
		rcv := newScripted(t)
		ep, url := rcv.add("/outbox", nil)
		c.subscribe(url, "outbox.event", client.SubscriptionInput{})
		var ids []string
		for i := range 20 {
			res, err := broken.PublishEventWithResponse(t.Context(), nil, client.PublishBody{Type: "outbox.event", Source: "t", Data: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))})
			ids = append(ids, body(t, "publish event", expect(t, "publish event", res, err, http.StatusAccepted).JSON202).Id)
		}
		waitAllArrived(t, ep, ids, 20*time.Second)
	})
	t.Run("delivery append lost at fan-out", func(t *testing.T) {
		t.Parallel()
		// Every event through the fan-out stage, whose appends fail: its
		// fresh deliveries come back when their reservation ends.
		c := newCluster(t, func(cfg *bootstrap.Config) { cfg.InlineFanOutMax = 0 })
		c.start(bootstrap.RoleWorker, failPublishTo(ports.DeliveryStream))
		c.start(bootstrap.RoleScheduler)
		rcv := newScripted(t)
		ep, url := rcv.add("/outbox", nil)
		c.subscribe(url, "outbox.delivery", client.SubscriptionInput{})
		var ids []string
		for i := range 20 {
			ids = append(ids, c.publish("outbox.delivery", fmt.Sprintf(`{"i":%d}`, i)))
		}
		waitAllArrived(t, ep, ids, 20*time.Second)
	})
}

// flushDB is the Redis database the flush test owns: FLUSHALL would wipe
// the other test packages' keys on the shared server, so the test flushes a
// database of its own, which loses the same things (streams, groups,
// pending entries) for this deployment.
const flushDB = 15

// TestRedisFlushedMidRunLosesNothing flushes Redis while 1,000 events are
// in flight; everything is still delivered from PostgreSQL state.
func TestRedisFlushedMidRunLosesNothing(t *testing.T) {
	t.Parallel()
	opts, err := goredis.ParseURL(redistest.URL())
	if err != nil {
		t.Fatal(err)
	}
	opts.DB = flushDB
	rdb := goredis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.FlushDB(context.Background()).Err(); _ = rdb.Close() })
	redistest.Client(t) // fails clearly when Redis is down
	url := fmt.Sprintf("redis://%s/%d", opts.Addr, flushDB)

	c := newCluster(t, func(cfg *bootstrap.Config) {
		cfg.RedisURL, cfg.RedisKeyPrefix = url, "flush:"
		cfg.WorkerConcurrency = 4 // a modest worker, so work piles up
	})
	c.start(bootstrap.RoleWorker)
	c.start(bootstrap.RoleScheduler)
	rcv := newScripted(t)
	ep, hook := rcv.add("/flush", takesAMoment(2*time.Millisecond))
	c.subscribe(hook, "bulk.event", client.SubscriptionInput{})

	const n = 1000
	ids := make([]string, n)
	var published sync.WaitGroup
	next := make(chan int)
	for range 8 {
		published.Add(1)
		go func() {
			defer published.Done()
			for i := range next {
				res, err := c.api.PublishEventWithResponse(t.Context(), nil, client.PublishBody{
					Type: "bulk.event", Source: "t", Data: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)),
				})
				switch {
				case err != nil:
					t.Errorf("publish %d: %v", i, err)
				case res.StatusCode() != http.StatusAccepted:
					t.Errorf("publish %d answered %d", i, res.StatusCode())
				case res.JSON202 == nil:
					t.Errorf("publish %d answered 202, but no body was decoded: the OpenAPI document declares none", i)
				default:
					ids[i] = res.JSON202.Id
				}
			}
		}()
	}
	go func() {
		for i := range n {
			next <- i
		}
		close(next)
	}()
	// Flush once deliveries are flowing, while most of the work is still
	// queued in Redis: unread and pending stream entries, consumer groups.
	waitFor(t, 30*time.Second, "the first 100 deliveries", func() bool { return len(ep.got()) >= 100 })
	if err := rdb.FlushDB(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("flushed Redis with %d of %d events delivered", len(ep.got()), n)
	published.Wait()
	waitAllArrived(t, ep, ids, 60*time.Second)
}
