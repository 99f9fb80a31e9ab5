package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.uber.org/fx"

	"github.com/dispatch-webhooks/dispatch/adapters/metrics"
	"github.com/dispatch-webhooks/dispatch/application"
	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// Role is what a process does.
type Role string

// Roles of SPEC §2.
const (
	RoleAPI       Role = "api"
	RoleWorker    Role = "worker"
	RoleScheduler Role = "scheduler"
	RoleAll       Role = "all"
	RoleDev       Role = "dev"
	RoleMigrate   Role = "migrate"
	// RoleReencrypt is a command rather than a service: it seals every
	// subscription under the first encryption key, then exits.
	RoleReencrypt Role = "reencrypt"
)

// Roles lists every role, for help texts and tests.
var Roles = []Role{RoleAPI, RoleWorker, RoleScheduler, RoleAll, RoleDev, RoleMigrate, RoleReencrypt}

// Options returns the fx options of role: the modules it is made of.
func Options(role Role, cfg Config) (fx.Option, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if (role == RoleAPI || role == RoleAll || role == RoleDev) && len(cfg.APIKeys) == 0 {
		return nil, fmt.Errorf("role %s serves the API: set at least one key in DISPATCH_API_KEYS or --api-keys", role)
	}
	if role == RoleReencrypt && cfg.EncryptionKeys == "" {
		return nil, fmt.Errorf("role %s seals subscriptions under the first key of DISPATCH_ENCRYPTION_KEYS or --encryption-keys: set it", role)
	}
	// Worker and scheduler write only state a database crash may lose:
	// it replays (see postgres.AsyncCommits).
	cfg.asyncCommits = role == RoleWorker || role == RoleScheduler
	base := []fx.Option{configModule(cfg), quietFx}
	durable := []fx.Option{postgresModule, redisModule, coreModule}
	switch role {
	case RoleAPI:
		return fx.Options(append(append(base, durable...), apiModule)...), nil
	case RoleWorker:
		return fx.Options(append(append(base, durable...), workerModule, adminModule)...), nil
	case RoleScheduler:
		return fx.Options(append(append(base, durable...), schedulerModule, adminModule)...), nil
	case RoleAll:
		return fx.Options(append(append(base, durable...), migrateOnStart, apiModule, workerModule, schedulerModule)...), nil
	case RoleDev:
		return fx.Options(append(base, memoryStoreModule, embeddedRedisModule, coreModule,
			apiModule, workerModule, schedulerModule, devBanner)...), nil
	case RoleMigrate:
		return fx.Options(append(base, postgresModule, migrateOnStart)...), nil
	case RoleReencrypt:
		return fx.Options(append(base, postgresModule, reencryptOnStart)...), nil
	}
	return nil, fmt.Errorf("unknown role %q (want one of %v)", role, Roles)
}

// loops runs background loops from OnStart until OnStop, and on stop waits
// for them to finish their work in flight (bounded by the stop context).
type loops struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func startLoops(lc fx.Lifecycle, runs ...func(ctx context.Context)) {
	l := &loops{}
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error {
			ctx, cancel := context.WithCancel(context.Background())
			l.cancel = cancel
			for _, run := range runs {
				l.wg.Add(1)
				go func() { defer l.wg.Done(); run(ctx) }()
			}
			return nil
		},
		OnStop: func(ctx context.Context) error {
			l.cancel()
			done := make(chan struct{})
			go func() { l.wg.Wait(); close(done) }()
			select {
			case <-done:
				return nil
			case <-ctx.Done():
				return fmt.Errorf("work in flight did not finish before the stop timeout: %w", ctx.Err())
			}
		},
	})
}

// handlersFor is how many deliveries a worker handles at once when
// concurrency of them may be between their claim and their endpoint's
// answer (application.Deliver.Requests): a quarter more, to record
// outcomes and to have the next deliveries read while the requests are
// under way, so that recording an outcome does not take a request's
// place. Requests itself is sized in
// coreModule, where the Deliver use case is built. A handler is held
// past its claim only while its subscription is within its share of
// Requests (at most half of it): a hanging endpoint keeps no more
// handlers than that, plus claims and postponements of a few
// milliseconds, and reading goes on for the others.
func handlersFor(concurrency int) int {
	return concurrency + max(concurrency/4, 1)
}

// fanOutHandlers is how many fan-out calls a worker runs at once, each a
// read of up to 100 events and one statement for their deliveries; the
// worker warms a connection for each (postgres.Store.WarmFanOut).
const fanOutHandlers = 2

// workerModule runs fan-out and delivery consumers.
var workerModule = fx.Module("worker",
	fx.Provide(newWarmedDeliveries),
	fx.Invoke(func(lc fx.Lifecycle, cfg Config, log *slog.Logger, m *metrics.Metrics, queue ports.Queue,
		fanout *application.FanOut, deliver *application.Deliver, _ warmedDeliveries,
	) {
		name := consumerName("worker")
		onErr := func(err error) { log.Error("stream consumer failed", "error", err) }
		onMalformed := func(stream string) func(ports.Message) {
			return func(msg ports.Message) {
				m.Malformed(stream)
				log.Warn("malformed stream entry acknowledged and dropped", "stream", stream, "entry", msg.ID, "body", msg.Body)
			}
		}
		fanoutConsumer := &application.Consumer{
			Queue: queue, Stream: ports.EventStream, Group: application.FanOutGroup, Name: name,
			Batch: 100, Block: time.Second, Concurrency: fanOutHandlers, OnError: onErr,
			Valid:       func(body string) bool { return domain.IsID(domain.EventIDPrefix, body) },
			OnMalformed: onMalformed(ports.EventStream),
			Handle: func(ctx context.Context, msgs []ports.Message) []string {
				ids, acks := bodiesAndIDs(msgs)
				err := fanout.Handle(ctx, ids)
				switch {
				case err == nil:
				case errors.Is(err, application.ErrEnqueueDeferred):
					m.EnqueueDeferred()
					log.Warn("deliveries committed but not enqueued; the scheduler will enqueue them", "error", err)
				case ctx.Err() != nil:
					return nil // stopping: the events stay pending in the stream
				default:
					log.Error("fan-out failed; the events stay pending in the stream", "events", len(ids), "error", err)
					return nil
				}
				return acks
			},
		}
		// reportAttempt counts and logs what became of a delivery, the
		// entry's handler's or, parked, later.
		reportAttempt := func(res application.Attempted, err error) {
			if err != nil {
				// Its entry was acknowledged; the delivery comes back
				// when its lease ends.
				log.Error("delivery attempt not recorded", "delivery_id", res.Delivery.ID, "error", err)
				return
			}
			if res.Degraded != nil {
				m.ProtectionFailed()
				log.Warn("shared endpoint protection unavailable; delivery protected by this worker alone", "delivery_id", res.Delivery.ID, "error", res.Degraded)
			}
			if res.Postponed != "" {
				m.Postponed(res.Postponed)
			}
			if res.Breaker != nil {
				m.Circuit(res.Delivery.SubscriptionID, *res.Breaker, res.Attempt.CreatedAt)
			}
			if !res.Skipped {
				m.Attempted(res.Delivery.Status, res.Attempt.Duration, res.EventCreatedAt, res.Attempt.CreatedAt)
				log.Debug("delivery attempted", "delivery_id", res.Delivery.ID, "attempt", res.Attempt.Number,
					"status", res.Delivery.Status, "status_code", res.Attempt.StatusCode, "error", res.Attempt.Error)
			}
		}
		deliver.Report = reportAttempt
		deliverConsumer := &application.Consumer{
			Queue: queue, Stream: ports.DeliveryStream, Group: application.DeliverGroup, Name: name,
			Batch: 64, Block: time.Second, Concurrency: handlersFor(cfg.WorkerConcurrency), PerEntry: true, OnError: onErr,
			Valid: func(body string) bool {
				id, _ := application.DeliveryEntry(body)
				return domain.IsID(domain.DeliveryIDPrefix, id)
			},
			OnMalformed: onMalformed(ports.DeliveryStream),
			Handle: func(ctx context.Context, msgs []ports.Message) []string {
				msg := msgs[0]
				id, _ := application.DeliveryEntry(msg.Body)
				res, err := deliver.Handle(ctx, msg.Body)
				if err != nil {
					log.Error("delivery attempt not recorded; the entry stays pending", "delivery_id", id, "error", err)
					return nil
				}
				reportAttempt(res, nil)
				return []string{msg.ID}
			},
		}
		runs := []func(context.Context){
			func(ctx context.Context) { _ = fanoutConsumer.Run(ctx) },
			func(ctx context.Context) { _ = deliverConsumer.Run(ctx) },
		}
		// Hooks stop in reverse: the consumers first, then what they
		// parked.
		lc.Append(fx.Hook{OnStop: deliver.Stop})
		startLoops(lc, runs...)
	}),
)

func bodiesAndIDs(msgs []ports.Message) (bodies, ids []string) {
	bodies = make([]string, len(msgs))
	ids = make([]string, len(msgs))
	for i, m := range msgs {
		bodies[i], ids[i] = m.Body, m.ID
	}
	return bodies, ids
}

// schedulerModule runs the scheduler's scans every poll interval.
var schedulerModule = fx.Module("scheduler",
	fx.Invoke(func(lc fx.Lifecycle, cfg Config, log *slog.Logger, m *metrics.Metrics, store ports.Store, queue ports.Queue, clock ports.Clock) {
		schedule := &application.Schedule{
			Events: store, Deliveries: store, Subscriptions: store, Queue: queue, Clock: clock,
			BatchSize: cfg.SchedulerBatchSize, VisibilityTimeout: cfg.VisibilityTimeout,
			IdempotencyWindow: cfg.IdempotencyWindow, Consumer: consumerName("scheduler"),
			Retention: cfg.Retention,
			// Every fifth tick at most, whatever the catch-up ticks.
			HistoryInterval: 5 * cfg.SchedulerPollInterval,
		}
		if history, ok := store.(ports.Retention); ok {
			schedule.History = history
		}
		backlog, _ := store.(ports.Backlog)
		storage, _ := store.(ports.Storage)
		lagging, _ := queue.(ports.StreamLag)
		startLoops(lc, func(ctx context.Context) {
			ticker := time.NewTicker(gaugeInterval)
			defer ticker.Stop()
			for {
				exportGauges(ctx, log, m, backlog, storage, lagging)
				select {
				case <-ctx.Done():
					return
				case <-ticker.C:
				}
			}
		}, func(ctx context.Context) {
			schedule.Run(ctx, cfg.SchedulerPollInterval, func(swept application.Swept, err error) {
				if err != nil && ctx.Err() == nil {
					log.Error("scheduler scan failed", "error", err)
				}
				m.Requeued("due_delivery", swept.DueDeliveries)
				m.Requeued("unfanned_event", swept.UnfannedEvents)
				m.Requeued("reclaimed_event", swept.ReclaimedEvents)
				m.Requeued("reclaimed_delivery", swept.ReclaimedDelivs)
				if h := swept.History; h.Created > 0 || h.Dropped > 0 || h.LockTimedOut {
					log.Info("history maintained", "windows_made", h.Created, "windows_dropped", h.Dropped, "windows_waiting", h.Waiting,
						"lock_timed_out", h.LockTimedOut, "took", h.Took)
				}
			})
		})
	}),
)

// gaugeInterval is how often the scheduler refreshes the backlog gauges:
// counting undelivered rows is cheap but not free.
const gaugeInterval = 5 * time.Second

// exportGauges refreshes the backlog and stream-lag gauges; a backend that
// cannot tell is skipped.
func exportGauges(ctx context.Context, log *slog.Logger, m *metrics.Metrics, backlog ports.Backlog, storage ports.Storage, lagging ports.StreamLag) {
	if history, ok := storage.(ports.Retention); ok {
		if counts, err := history.Partitions(ctx); err == nil {
			for table, n := range counts {
				m.Partitions(table, n)
			}
		} else if ctx.Err() == nil {
			log.Warn("partitions gauge not refreshed", "error", err)
		}
	}
	if storage != nil {
		if usage, err := storage.TableUsage(ctx); err == nil {
			for _, u := range usage {
				m.TableUsage(u.Table, u.Rows, u.Bytes)
			}
		} else if ctx.Err() == nil {
			log.Warn("storage gauges not refreshed", "error", err)
		}
	}
	if backlog != nil {
		if counts, err := backlog.UndeliveredCounts(ctx); err == nil {
			m.Backlog(counts)
		} else if ctx.Err() == nil {
			log.Warn("backlog gauges not refreshed", "error", err)
		}
	}
	if lagging != nil {
		for stream, group := range map[string]string{ports.EventStream: application.FanOutGroup, ports.DeliveryStream: application.DeliverGroup} {
			if lag, err := lagging.Lag(ctx, stream, group); err == nil {
				m.StreamLag(stream, lag.Total())
			} else if ctx.Err() == nil {
				log.Warn("stream lag gauge not refreshed", "stream", stream, "error", err)
			}
		}
	}
}

// devBanner says where dev mode listens and that nothing is durable.
var devBanner = fx.Invoke(func(lc fx.Lifecycle, cfg Config, api *APIServer) {
	lc.Append(fx.StartHook(func() {
		base := "http://" + api.Addr()
		fmt.Printf(`
  Dispatch dev mode: every role in one process, in-memory store and queue, embedded Redis.
  !!! NOTHING IS DURABLE: all events, subscriptions and deliveries are lost on exit. !!!

  API      %[1]s/v1
  Docs     %[1]s/docs
  OpenAPI  %[1]s/openapi.json
  Metrics  %[1]s/metrics
  API key  %[2]s   (Authorization: Bearer %[2]s)

`, base, cfg.APIKeys[0])
	}))
})
