package bootstrap_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"

	"github.com/dispatch-webhooks/dispatch/adapters/metrics/metricstest"
	"github.com/dispatch-webhooks/dispatch/adapters/postgres/pgtest"
	"github.com/dispatch-webhooks/dispatch/adapters/redis/redistest"
	"github.com/dispatch-webhooks/dispatch/bootstrap"
	"github.com/dispatch-webhooks/dispatch/client"
)

func TestMachineShareOfNoCount(t *testing.T) {
	t.Parallel()
	var none *bootstrap.MachineShare // `all` and `dev` count nothing
	if none.Shared() {
		t.Error("a worker that counts nothing counts as sharing its machine")
	}
	if none.StandBy() {
		t.Error("a worker that counts nothing stands by")
	}
}

func TestReaders(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		peers, mine int
		standingBy  bool
		want        int
	}{
		{1, 1, false, 1},
		{4, 4, false, 4},
		{4, 4, true, 1}, // only the first reads
		{1, 1, true, 1},
		{5, 3, true, 3}, // one of mine, and the other deployment's two
		{5, 3, false, 5},
		{0, 0, false, 1}, // no count is one
		{0, 0, true, 1},
	} {
		if got := bootstrap.Readers(tc.peers, tc.mine, tc.standingBy); got != tc.want {
			t.Errorf("Readers(%d, mine %d, standing by %v) = %d, want %d", tc.peers, tc.mine, tc.standingBy, got, tc.want)
		}
	}
}

// TestWorkersStandByOnASaturatedMachine starts two workers in this
// process, with a folder of their own to count each other in, behind a
// worker of another deployment (another Redis key prefix): while the
// machine is saturated the second stands by and the first delivers
// everything, the other deployment's worker making neither stand by; when
// the machine has time to spare the second reads again, and when the
// first ends it delivers.
func TestWorkersStandByOnASaturatedMachine(t *testing.T) {
	t.Parallel()
	var saturated atomic.Bool
	saturated.Store(true)
	c := newCluster(t, func(cfg *bootstrap.Config) {
		cfg.WorkerStandby = true
		*cfg = bootstrap.WithSlotDir(*cfg, t.TempDir())
		*cfg = bootstrap.WithSaturation(*cfg, saturated.Load)
	})
	c.start(bootstrap.RoleScheduler) // deliveries postponed by the subscription's limits come back through it
	rcv := newReceiver(t)
	_, secret := c.subscribe(rcv.srv.URL, "order.created", client.SubscriptionInput{})
	rcv.setSecret(secret)

	type worker struct {
		app   *fx.App
		share *bootstrap.MachineShare
		reg   *prometheus.Registry
	}
	start := func(cfg bootstrap.Config) worker {
		t.Helper()
		opts, err := bootstrap.Options(bootstrap.RoleWorker, cfg)
		if err != nil {
			t.Fatal(err)
		}
		var w worker
		w.app = fx.New(opts, fx.Populate(&w.share, &w.reg))
		if err := w.app.Start(t.Context()); err != nil {
			t.Fatalf("start worker: %v", err)
		}
		t.Cleanup(func() { _ = w.app.Stop(context.Background()) })
		return w
	}
	delivered := func(w worker) float64 {
		return metricstest.Value(t, w.reg, "dispatch_deliveries_total", "outcome", "delivered")
	}
	standingBy := func(w worker) bool { return metricstest.Value(t, w.reg, "dispatch_worker_standing_by") == 1 }
	publish := func(n int) {
		t.Helper()
		want := rcv.count() + n
		for i := range n {
			c.publish("order.created", fmt.Sprintf(`{"n":%d}`, i))
		}
		waitFor(t, 30*time.Second, fmt.Sprintf("%d deliveries", want), func() bool { return rcv.count() >= want })
	}

	otherCfg := c.cfg
	otherCfg.RedisKeyPrefix = redistest.Prefix(t)
	other := start(otherCfg)
	first := start(c.cfg)
	second := start(c.cfg)
	waitFor(t, 10*time.Second, "the second worker to stand by", func() bool {
		return second.share.StandBy() && standingBy(second)
	})
	if first.share.StandBy() || standingBy(first) {
		t.Fatal("the first worker stands by: another deployment's worker joined before it")
	}
	if other.share.StandBy() || standingBy(other) {
		t.Fatal("the other deployment's worker stands by")
	}

	publish(20)
	// A worker counts a delivery once its outcome is recorded, a moment
	// after the receiver has it.
	waitFor(t, 10*time.Second, "the first worker to count 20 deliveries", func() bool { return delivered(first) == 20 })
	if got := delivered(second); got != 0 {
		t.Errorf("the worker standing by delivered %v, want 0", got)
	}

	// Time to spare: the second reads again.
	saturated.Store(false)
	waitFor(t, 10*time.Second, "the second worker to stop standing by", func() bool { return !standingBy(second) })
	saturated.Store(true)
	waitFor(t, 10*time.Second, "the second worker to stand by again", func() bool { return standingBy(second) })

	// The first ends: the second, now the longest-standing, delivers.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := first.app.Stop(ctx); err != nil {
		t.Fatalf("stop the first worker: %v", err)
	}
	waitFor(t, 10*time.Second, "the second worker, now alone, to stop standing by", func() bool {
		return !second.share.StandBy() && !standingBy(second)
	})
	publish(20)
	waitFor(t, 10*time.Second, "the second worker, alone, to count 20 deliveries", func() bool { return delivered(second) == 20 })
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	for _, r := range rcv.got {
		if r.verifyErr != nil {
			t.Fatalf("a delivery failed verification: %v", r.verifyErr)
		}
	}
}

func TestProcessorShare(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ processors, peers, want int }{
		{2, 1, 2},
		{2, 2, 1},
		{2, 4, 1}, // never below one
		{8, 3, 2}, // rounded down: together they take no more than there is
		{64, 2, 32},
		{4, 0, 4}, // no count is one
	} {
		if got := bootstrap.ProcessorShare(tc.processors, tc.peers); got != tc.want {
			t.Errorf("ProcessorShare(%d, %d) = %d, want %d", tc.processors, tc.peers, got, tc.want)
		}
	}
}

// TestWorkersShareTheProcessors starts two workers in this process with a
// folder of their own to count each other in: together they size the
// process's runtime to one worker's share, and when one stops the other
// takes the whole again. GOMAXPROCS is the whole process's, so this test
// does not run in parallel with others.
func TestWorkersShareTheProcessors(t *testing.T) {
	processors := runtime.GOMAXPROCS(0)
	_, operatorSet := os.LookupEnv("GOMAXPROCS")
	cfg := testConfig(t)
	cfg.DatabaseURL = pgtest.NewDatabase(t)
	cfg.RedisURL = redistest.URL()
	cfg.RedisKeyPrefix = redistest.Prefix(t)
	cfg.WorkerShareProcessors = true
	cfg = bootstrap.WithSlotDir(cfg, t.TempDir())
	startApp(t, bootstrap.RoleMigrate, cfg)

	start := func() (*fx.App, *bootstrap.MachineShare) {
		t.Helper()
		opts, err := bootstrap.Options(bootstrap.RoleWorker, cfg)
		if err != nil {
			t.Fatal(err)
		}
		var share *bootstrap.MachineShare
		app := fx.New(opts, fx.Populate(&share))
		if err := app.Start(t.Context()); err != nil {
			t.Fatalf("start worker: %v", err)
		}
		return app, share
	}
	stop := func(app *fx.App) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := app.Stop(ctx); err != nil {
			t.Fatalf("stop worker: %v", err)
		}
	}
	want := func(what string, n int) {
		t.Helper()
		if operatorSet {
			n = processors // an operator's GOMAXPROCS is kept
		}
		deadline := time.Now().Add(10 * time.Second)
		for runtime.GOMAXPROCS(0) != n {
			if time.Now().After(deadline) {
				t.Fatalf("%s: GOMAXPROCS = %d, want %d", what, runtime.GOMAXPROCS(0), n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	shared := func(what string, share *bootstrap.MachineShare, want bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for share.Shared() != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s: Shared() = %v, want %v", what, !want, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	first, firstShare := start()
	want("one worker", processors)
	shared("one worker", firstShare, false)
	second, secondShare := start()
	want("two workers", bootstrap.ProcessorShare(processors, 2))
	shared("two workers, the first", firstShare, true)
	shared("two workers, the second", secondShare, true)
	stop(second)
	want("the first worker again alone", processors)
	shared("the first worker again alone", firstShare, false)
	stop(first)
	if got := runtime.GOMAXPROCS(0); got != processors {
		t.Errorf("after both stopped: GOMAXPROCS = %d, want %d as before", got, processors)
	}
}
