package bootstrap

import (
	"context"
	"log/slog"
	"time"

	"go.uber.org/fx"

	"github.com/dispatch-webhooks/dispatch/ports"
)

// warmTimeout bounds a role's warm-up: it only saves the first calls some
// milliseconds, so it must never hold a start back for long.
const warmTimeout = 5 * time.Second

// The adapters that can do their first calls' work (connections opened,
// statements prepared and planned, scripts loaded) before the process takes
// traffic; see postgres.Store.WarmIngest. A store or protection without it
// (the in-memory ones) has nothing to warm.
type (
	ingestWarmer     interface{ WarmIngest(context.Context) error }
	deliveryWarmer   interface{ WarmDeliveries(context.Context) error }
	protectionWarmer interface{ Warm(context.Context) error }
)

// fanOutWarmer readies a connection for each of the worker's fan-out
// handlers (postgres.Store.WarmFanOut).
type fanOutWarmer interface {
	WarmFanOut(ctx context.Context, handlers int) error
}

// warmedIngest is the API's warm-up, done on start before its server
// listens (newAPIServer depends on it, so its hook runs first).
type warmedIngest struct{}

func newWarmedIngest(lc fx.Lifecycle, store ports.Store, log *slog.Logger) warmedIngest {
	if w, ok := store.(ingestWarmer); ok {
		lc.Append(fx.StartHook(func(ctx context.Context) { warm(ctx, log, "ingest", w.WarmIngest) }))
	}
	return warmedIngest{}
}

// warmedDeliveries is the worker's warm-up, done on start before its
// consumers read.
type warmedDeliveries struct{}

func newWarmedDeliveries(lc fx.Lifecycle, store ports.Store, p protections, log *slog.Logger) warmedDeliveries {
	if w, ok := store.(deliveryWarmer); ok {
		lc.Append(fx.StartHook(func(ctx context.Context) { warm(ctx, log, "deliveries", w.WarmDeliveries) }))
	}
	if w, ok := store.(fanOutWarmer); ok {
		lc.Append(fx.StartHook(func(ctx context.Context) {
			warm(ctx, log, "fan-out", func(ctx context.Context) error { return w.WarmFanOut(ctx, fanOutHandlers) })
		}))
	}
	if w, ok := p.Protection.(protectionWarmer); ok {
		lc.Append(fx.StartHook(func(ctx context.Context) { warm(ctx, log, "protection", w.Warm) }))
	}
	return warmedDeliveries{}
}

// warm runs fn within warmTimeout. A failure is logged and the start goes
// on: the process works unwarmed, its first calls merely slower, and a
// backend that is down is readiness's business.
func warm(ctx context.Context, log *slog.Logger, what string, fn func(context.Context) error) {
	ctx, cancel := context.WithTimeout(ctx, warmTimeout)
	defer cancel()
	started := time.Now()
	if err := fn(ctx); err != nil {
		log.Warn("warm-up failed; the first calls will be slower", "warm", what, "error", err)
		return
	}
	log.Debug("warmed up", "warm", what, "took", time.Since(started))
}
