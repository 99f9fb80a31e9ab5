package bootstrap

import (
	"context"
	"log/slog"
	"os"
	"runtime"
	"sync/atomic"
	"time"

	"go.uber.org/fx"

	"github.com/dispatch-webhooks/dispatch/adapters/host"
)

// machineShareInterval is how often a worker counts the workers on its
// machine; one that starts or ends changes the others' share within it.
const machineShareInterval = 250 * time.Millisecond

// processorShare is a worker's share of processors when peers workers,
// itself included, share processors: at least one.
func processorShare(processors, peers int) int {
	return max(1, processors/max(peers, 1))
}

// machineShare is a worker process's place among the Dispatch workers on
// its machine: how many there are (host.Slot), counted every
// machineShareInterval.
type machineShare struct {
	peers atomic.Int32
}

// Shared reports whether other workers ran on the machine at the last
// count. Safe for concurrent use; it reads no files.
func (m *machineShare) Shared() bool { return m != nil && m.peers.Load() > 1 }

// machineShareModule counts the worker processes on the machine, for the
// read wait of a saturated machine (which only workers that share one
// need: see workerModule) and, with Config.WorkerShareProcessors, to size
// the process's Go runtime to its share of the processors. Each Go runtime
// runs up to GOMAXPROCS threads at once, by default one per processor, so
// four workers on two processors would keep up to eight threads busy, each
// woken for a quarter of the deliveries and taking turns with the API and
// the databases for the same two processors; sharing keeps the workers
// together at about one thread per processor. An operator who set
// GOMAXPROCS keeps it. Only the worker role uses this module: in `all` and
// `dev` the API shares the process.
var machineShareModule = fx.Module("machine-share",
	fx.Provide(func(lc fx.Lifecycle, cfg Config, log *slog.Logger) *machineShare {
		share := &machineShare{}
		share.peers.Store(1)
		_, operatorSet := os.LookupEnv("GOMAXPROCS")
		sizing := cfg.WorkerShareProcessors && !operatorSet
		processors := runtime.GOMAXPROCS(0)
		var slot *host.Slot
		count := func() {
			peers := slot.Peers()
			share.peers.Store(int32(peers))
			if !sizing {
				return
			}
			want := processorShare(processors, peers)
			if was := runtime.GOMAXPROCS(0); want != was {
				runtime.GOMAXPROCS(want)
				log.Info("worker sized to its share of the machine's processors", "gomaxprocs", want, "was", was, "processors", processors)
			}
		}
		// Appended before the loop's hooks, so that on stop it runs after
		// the loop has ended (fx stops in reverse order).
		lc.Append(fx.Hook{
			OnStart: func(context.Context) error {
				dir := cfg.slotDir
				if dir == "" {
					dir = host.DefaultSlotDir()
				}
				slot = host.Join(dir)
				count()
				return nil
			},
			OnStop: func(context.Context) error {
				if sizing {
					runtime.GOMAXPROCS(processors)
				}
				return slot.Close()
			},
		})
		startLoops(lc, func(ctx context.Context) {
			ticker := time.NewTicker(machineShareInterval)
			defer ticker.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-ticker.C:
					count()
				}
			}
		})
		return share
	}),
)
