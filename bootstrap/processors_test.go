package bootstrap_test

import (
	"context"
	"os"
	"runtime"
	"testing"
	"time"

	"go.uber.org/fx"

	"github.com/dispatch-webhooks/dispatch/adapters/postgres/pgtest"
	"github.com/dispatch-webhooks/dispatch/adapters/redis/redistest"
	"github.com/dispatch-webhooks/dispatch/bootstrap"
)

func TestMachineShareOfNoCount(t *testing.T) {
	t.Parallel()
	var none *bootstrap.MachineShare // `all` and `dev` count nothing
	if none.Shared() {
		t.Error("a worker that counts nothing counts as sharing its machine")
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
