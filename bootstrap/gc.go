package bootstrap

import (
	"context"
	"log/slog"
	"os"
	"runtime/debug"

	"go.uber.org/fx"
)

// workerGCPercent is the worker process's garbage collection target
// (GOGC) unless the environment sets GOGC. A worker's heap is mostly
// short-lived garbage (requests, rows, replies): collecting when it has
// grown by 200 % of what is live, not 100 %, halves how often the
// collector runs for a few tens of MiB more. On the 2-core machine of
// docs/performance.md (*The worker's garbage collection*), the machine's
// time per delivery fell 3–7 % in W4 and 5–9 % in W3 (alternating runs),
// and a W3 worker peaked at 108–111 MiB of RSS instead of 68–77.
const workerGCPercent = 200

// workerGCModule sets workerGCPercent for the worker role's process, and
// puts back what it found when the process stops. Only the worker role
// uses it: in `all` and `dev` the API's heap shares the process.
var workerGCModule = fx.Module("worker-gc",
	fx.Invoke(func(lc fx.Lifecycle, log *slog.Logger) {
		if _, operatorSet := os.LookupEnv("GOGC"); operatorSet {
			return
		}
		var was int
		lc.Append(fx.Hook{
			OnStart: func(context.Context) error {
				was = debug.SetGCPercent(workerGCPercent)
				log.Debug("worker garbage collection target set", "gogc", workerGCPercent, "was", was)
				return nil
			},
			OnStop: func(context.Context) error {
				debug.SetGCPercent(was)
				return nil
			},
		})
	}),
)
