package bootstrap

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
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
// its machine: how many there are (host.Slot), how many of them are its
// deployment's and how many of those joined before it, counted every
// machineShareInterval, and whether the machine is saturated (host.CPU).
type machineShare struct {
	peers atomic.Int32
	// first: no worker of this deployment on the machine joined before
	// this one.
	first atomic.Bool
	// saturated tells whether the machine is saturated.
	saturated func() bool
	standby   bool // Config.WorkerStandby
}

// Shared reports whether other workers ran on the machine at the last
// count. Safe for concurrent use; it reads no files.
func (m *machineShare) Shared() bool { return m != nil && m.peers.Load() > 1 }

// Saturated reports whether the machine's processors are saturated
// (host.CPU: busy 95 % of a half second, until below 85 % over a whole
// one). Safe for concurrent use.
func (m *machineShare) Saturated() bool { return m != nil && m.saturated() }

// StandBy reports whether this worker should read nothing now: with
// Config.WorkerStandby, while the machine is saturated and another worker
// of its deployment on the machine joined before it
// (host.Census.Ahead) and reads. Of a deployment's workers on a saturated
// machine only the longest-standing one reads: more processes taking
// turns for the same processors add no throughput, only their share of
// the wake-ups, batches a fraction of one worker's size, and more
// connections to PostgreSQL, Redis and the endpoints (see
// docs/performance.md). They agree on which without talking to each
// other, and when the reading one ends, the next in line reads at the
// next count. Workers of other deployments (another Redis, or key
// prefix: other streams) never make a worker stand by. Safe for
// concurrent use; it reads no files.
func (m *machineShare) StandBy() bool {
	return m != nil && m.standby && !m.first.Load() && m.saturated()
}

// readers is how many of the peers workers on the machine read, mine of
// them of this worker's deployment: all of them, or on a saturated
// machine where workers stand by, one of mine and all the others (whose
// deployments this worker cannot see into).
func readers(peers, mine int, standingBy bool) int {
	if standingBy {
		return max(peers-mine+1, 1)
	}
	return max(peers, 1)
}

// deploymentSlotDir is the folder where the workers of one deployment
// (the streams of one Redis and key prefix) count each other, inside the
// machine's.
func deploymentSlotDir(machineDir string, cfg Config) string {
	sum := sha256.Sum256([]byte(cfg.RedisURL + "\x00" + cfg.RedisKeyPrefix))
	return filepath.Join(machineDir, "deployment-"+hex.EncodeToString(sum[:8]))
}

// machineShareModule counts the worker processes on the machine and
// samples how busy it is, for the read wait of a saturated machine (which
// only workers that share one need: see workerModule), for standing by
// (Config.WorkerStandby), and, with Config.WorkerShareProcessors, to size
// the process's Go runtime to its share of the processors among the
// workers that read. Each Go runtime runs up to GOMAXPROCS threads at
// once, by default one per processor, so four workers on two processors
// would keep up to eight threads busy, each woken for a quarter of the
// deliveries and taking turns with the API and the databases for the same
// two processors; sharing keeps the workers together at about one thread
// per processor. An operator who set GOMAXPROCS keeps it. Only the worker
// role uses this module: in `all` and `dev` the API shares the process.
var machineShareModule = fx.Module("machine-share",
	fx.Provide(func(lc fx.Lifecycle, cfg Config, log *slog.Logger) *machineShare {
		cpu := &host.CPU{}
		share := &machineShare{saturated: cpu.Saturated, standby: cfg.WorkerStandby}
		if cfg.saturated != nil {
			share.saturated = cfg.saturated
		}
		share.peers.Store(1)
		share.first.Store(true)
		_, operatorSet := os.LookupEnv("GOMAXPROCS")
		sizing := cfg.WorkerShareProcessors && !operatorSet
		processors := runtime.GOMAXPROCS(0)
		var slot, deployment *host.Slot
		count := func() {
			machine, mine := slot.Census(), deployment.Census()
			share.peers.Store(int32(machine.Peers))
			share.first.Store(mine.Ahead == 0)
			if !sizing {
				return
			}
			standingBy := share.standby && mine.Peers > 1 && share.saturated()
			want := processorShare(processors, readers(machine.Peers, mine.Peers, standingBy))
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
				deployment = host.Join(deploymentSlotDir(dir, cfg))
				count()
				return nil
			},
			OnStop: func(context.Context) error {
				if sizing {
					runtime.GOMAXPROCS(processors)
				}
				return errors.Join(deployment.Close(), slot.Close())
			},
		})
		loops := []func(context.Context){func(ctx context.Context) {
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
		}}
		if cfg.saturated == nil && (cfg.WorkerStandby || cfg.WorkerSaturatedReadWait > cfg.WorkerReadWait) {
			loops = append(loops, func(ctx context.Context) {
				if err := cpu.Run(ctx); err != nil {
					log.Warn("cannot tell whether the machine is saturated; the worker never waits nor stands by for it", "error", err)
				}
			})
		}
		startLoops(lc, loops...)
		return share
	}),
)
