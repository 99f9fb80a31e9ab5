package bootstrap

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"

	"github.com/dispatch-webhooks/dispatch/adapters/httpapi"
	"github.com/dispatch-webhooks/dispatch/adapters/kafka"
	"github.com/dispatch-webhooks/dispatch/adapters/keyring"
	"github.com/dispatch-webhooks/dispatch/adapters/memory"
	"github.com/dispatch-webhooks/dispatch/adapters/metrics"
	"github.com/dispatch-webhooks/dispatch/adapters/nats"
	"github.com/dispatch-webhooks/dispatch/adapters/postgres"
	"github.com/dispatch-webhooks/dispatch/adapters/redis"
	"github.com/dispatch-webhooks/dispatch/adapters/webhook"
	"github.com/dispatch-webhooks/dispatch/application"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// Version is the build's version, sent in User-Agent and the OpenAPI
// document.
var Version = "0.1.0"

// configModule supplies the configuration, the logger and the metrics.
func configModule(cfg Config) fx.Option {
	return fx.Module("config",
		fx.Supply(cfg),
		fx.Provide(newLogger),
		fx.Provide(newRegistry, metrics.New),
	)
}

// quietFx makes fx print only failures; it must sit at the top level of an
// app, outside any module, to apply to the whole app.
var quietFx = fx.WithLogger(func(log *slog.Logger) fxevent.Logger { return fxFailures{log} })

func newRegistry() (*prometheus.Registry, prometheus.Registerer) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg, reg
}

// postgresModule provides the PostgreSQL store, sealing subscriptions'
// secrets and headers with the configured keys (newKeyRing).
var postgresModule = fx.Module("postgres",
	fx.Provide(newPool, newBatchPool, newKeyRing, func(pool *pgxpool.Pool, batch batchPool, ring *keyring.Ring) ports.Store {
		return postgres.New(pool, postgres.BatchPool(batch.Pool), postgres.Encryption(ring))
	}),
)

// batchPool is the small pool the store's group-committed worker
// statements run on (see postgres.ConnectBatches).
type batchPool struct{ *pgxpool.Pool }

func newPool(lc fx.Lifecycle, cfg Config) (*pgxpool.Pool, error) {
	return connectPostgres(lc, cfg, postgres.Connect)
}

func newBatchPool(lc fx.Lifecycle, cfg Config) (batchPool, error) {
	pool, err := connectPostgres(lc, cfg, postgres.ConnectBatches)
	return batchPool{pool}, err
}

// connectPostgres opens a pool with connect, closed when the app stops.
func connectPostgres(lc fx.Lifecycle, cfg Config, connect func(context.Context, string, ...postgres.ConnectOption) (*pgxpool.Pool, error)) (*pgxpool.Pool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var opts []postgres.ConnectOption
	if cfg.asyncCommits {
		opts = append(opts, postgres.AsyncCommits())
	}
	pool, err := connect(ctx, cfg.DatabaseURL, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL at %s: %w", redactURL(cfg.DatabaseURL), err)
	}
	lc.Append(fx.StopHook(pool.Close))
	return pool, nil
}

// migrateOnStart applies pending migrations before anything else starts,
// then makes sure the history has windows for what is written from now on
// (the scheduler keeps making them; a process that starts first, or
// alone, must not find none).
var migrateOnStart = fx.Invoke(func(pool *pgxpool.Pool, cfg Config, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := postgres.Migrate(ctx, pool); err != nil {
		return fmt.Errorf("apply migrations: %w", err)
	}
	log.Info("migrations applied")
	done, err := postgres.New(pool).MaintainHistory(ctx, time.Now(), cfg.Retention)
	if err != nil {
		return fmt.Errorf("make history windows: %w", err)
	}
	log.Info("history windows checked", "windows_made", done.Created, "windows_dropped", done.Dropped, "skipped", done.Skipped)
	return nil
})

// memoryStoreModule provides the in-process store of `dispatch dev`.
var memoryStoreModule = fx.Module("memory-store",
	fx.Provide(func() ports.Store { return memory.NewStore() }, noReadyWarnings),
)

// redisModule provides Redis, for protections, and the queue chosen by
// DISPATCH_QUEUE.
var redisModule = fx.Module("redis",
	fx.Provide(newRedisClient, newChosenQueue),
)

func newRedisClient(lc fx.Lifecycle, cfg Config) (goredis.UniversalClient, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	connect := redis.Connect
	if cfg.RedisCluster {
		connect = redis.ConnectCluster
	}
	client, err := connect(ctx, cfg.RedisURL)
	if err != nil {
		return nil, fmt.Errorf("connect to Redis at %s: %w", redactURL(cfg.RedisURL), err)
	}
	lc.Append(fx.StopHook(client.Close))
	return client, nil
}

// embeddedRedisModule runs an in-process Redis (miniredis), for
// protections, and the in-memory queue, for `dispatch dev`.
var embeddedRedisModule = fx.Module("embedded-redis",
	fx.Provide(newEmbeddedRedis, func() ports.Queue { return memory.NewQueue(memory.QueueOptions{}) }),
)

func newEmbeddedRedis(lc fx.Lifecycle) (goredis.UniversalClient, error) {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		return nil, fmt.Errorf("start embedded Redis: %w", err)
	}
	client := goredis.NewClient(&goredis.Options{Addr: mr.Addr()})
	lc.Append(fx.StopHook(func() { _ = client.Close(); mr.Close() }))
	return client, nil
}

// newChosenQueue connects the queue adapter of cfg.Queue.
func newChosenQueue(lc fx.Lifecycle, client goredis.UniversalClient, cfg Config) (ports.Queue, error) {
	switch cfg.Queue {
	case QueueRedis:
		return newQueue(client, cfg)
	case QueueNATS:
		return newNATSQueue(lc, cfg)
	case QueueKafka:
		return newKafkaQueue(lc, cfg)
	}
	return nil, fmt.Errorf("unknown queue %q (want one of %s)", cfg.Queue, strings.Join(queues, ", "))
}

// newQueue is the Redis Streams queue on client: cfg.QueuePartitions
// streams per queue stream, named after cfg.QueuePrefix.
func newQueue(client goredis.UniversalClient, cfg Config) (ports.Queue, error) {
	opts := redis.DefaultQueueOptions()
	opts.Prefix = cfg.RedisKeyPrefix
	opts.Name = cfg.QueuePrefix
	opts.Partitions = cfg.QueuePartitions
	return redis.NewQueue(client, opts)
}

// newKafkaQueue is the Kafka queue at cfg.KafkaBrokers, closed (leaving its
// consumer groups) when the app stops.
func newKafkaQueue(lc fx.Lifecycle, cfg Config) (ports.Queue, error) {
	q, err := kafka.New(kafka.Options{Brokers: cfg.KafkaBrokers, Prefix: cfg.QueuePrefix, Partitions: cfg.QueuePartitions})
	if err != nil {
		return nil, err
	}
	lc.Append(fx.StopHook(q.Close))
	return q, nil
}

// newNATSQueue is the JetStream queue at cfg.NATSURL; its connection closes
// when the app stops, after the consumers using it.
func newNATSQueue(lc fx.Lifecycle, cfg Config) (ports.Queue, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nc, err := nats.Connect(ctx, cfg.NATSURL)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w", redactURL(cfg.NATSURL), err)
	}
	lc.Append(fx.StopHook(nc.Close))
	q, err := nats.NewQueue(nc, nats.QueueOptions{
		Prefix: cfg.QueuePrefix, Partitions: cfg.QueuePartitions, AckWait: cfg.VisibilityTimeout,
	})
	if err != nil {
		nc.Close()
		return nil, err
	}
	return q, nil
}

// coreModule provides the use cases.
var coreModule = fx.Module("core",
	fx.Provide(
		func() ports.Clock { return ports.SystemClock{} },
		newSender,
		func(store ports.Store, queue ports.Queue, clock ports.Clock, cfg Config) *application.Ingest {
			inline := cfg.InlineFanOutMax
			if inline == 0 {
				inline = -1 // off
			}
			return &application.Ingest{Events: store, Queue: queue, Clock: clock, IdempotencyWindow: cfg.IdempotencyWindow, MaxInlineDeliveries: inline,
				VisibilityTimeout: cfg.VisibilityTimeout}
		},
		func(store ports.Store, queue ports.Queue, clock ports.Clock, cfg Config, m *metrics.Metrics, log *slog.Logger) *application.FanOut {
			lag, _ := queue.(ports.StreamLag)
			return &application.FanOut{Subscriptions: store, Events: store, Deliveries: store, Queue: queue, Clock: clock,
				VisibilityTimeout: cfg.VisibilityTimeout, Lag: lag, MaxUnread: cfg.FanOutMaxUnread, Held: m.FanOutHeld,
				Failed: func(eventID, reason string) {
					m.FanOutFailed()
					log.Warn("event settled as failed: it could not be fanned out", "event_id", eventID, "reason", reason)
				}}
		},
		func(store ports.Store, sender ports.Sender, queue ports.Queue, clock ports.Clock, cfg Config, p protections) *application.Deliver {
			return &application.Deliver{
				Deliveries: store, Subscriptions: store, Sender: sender, Queue: queue, Clock: clock,
				// Local caps this process's requests per endpoint while
				// Redis fails, rather than letting them all through.
				Protection: p.Protection, Local: memory.NewProtection(memory.ProtectionOptions{}),
				Breaker: cfg.Breaker(), Random: rand.Float64, UserAgent: "Dispatch/" + Version,
				Requests: make(chan struct{}, cfg.WorkerConcurrency),
			}
		},
		newGuard,
		func(store ports.Store, clock ports.Clock, guard ports.EndpointGuard, cfg Config) *application.Subscriptions {
			return &application.Subscriptions{Store: store, Clock: clock, Guard: guard, RotationOverlap: cfg.SecretRotationOverlap}
		},
		func(store ports.Store) *application.Events {
			return &application.Events{Events: store, Deliveries: store}
		},
		func(store ports.Store, queue ports.Queue, clock ports.Clock) *application.Deliveries {
			return &application.Deliveries{Deliveries: store, Subscriptions: store, Queue: queue, Clock: clock}
		},
		newReady,
		newProtections,
	),
)

// protections are the shared endpoint protections, on Redis: their own
// value in the graph, so a test can replace them with fx.Decorate.
type protections struct {
	fx.In
	Protection ports.Protection
}

func newProtections(client goredis.UniversalClient, cfg Config) ports.Protection {
	return redis.NewProtection(client, cfg.RedisKeyPrefix, redis.ProtectionOptions{})
}

// newSender and newGuard apply the same SSRF policy: the guard when a
// subscription's URL is set, the sender's dialer at every connection. Each
// is its own value in the graph, so a test can replace one with fx.Decorate
// (a guard with a scripted resolver, to test DNS rebinding).
func newSender(cfg Config) ports.Sender {
	return webhook.NewSender(senderOptions(cfg))
}

// senderOptions allows a connection per delivery the worker may have in
// flight, since all of them can be to one host: a send that finds every
// connection busy waits for one.
func senderOptions(cfg Config) webhook.SenderOptions {
	keep := cfg.AttemptBodyBytes
	if keep == 0 {
		keep = -1 // none; the sender's zero value is its default
	}
	return webhook.SenderOptions{Policy: cfg.TargetPolicy(), MaxConnsPerHost: cfg.WorkerConcurrency, Proxy: cfg.OutboundProxy, KeepBody: keep}
}

func newGuard(cfg Config) ports.EndpointGuard {
	return webhook.Guard{Policy: cfg.TargetPolicy()}
}

// Ready reports whether the store and the queue are reachable.
type Ready func(ctx context.Context) error

func newReady(store ports.Store, queue ports.Queue) Ready {
	return func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if err := store.Ping(ctx); err != nil {
			return fmt.Errorf("store: %w", err)
		}
		if err := queue.Ping(ctx); err != nil {
			return fmt.Errorf("queue: %w", err)
		}
		return nil
	}
}

// HTTPServer is a listening HTTP server owned by the fx lifecycle.
type HTTPServer struct {
	srv *http.Server
	ln  net.Listener
}

// Addr is the address the server listens on (useful with port 0).
func (s *HTTPServer) Addr() string { return s.ln.Addr().String() }

// serveHTTP serves handler on addr with net/http's server.
func serveHTTP(lc fx.Lifecycle, addr string, handler http.Handler, log *slog.Logger) *HTTPServer {
	return serve(lc, addr, &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}, log)
}

func serve(lc fx.Lifecycle, addr string, srv *http.Server, log *slog.Logger) *HTTPServer {
	s := &HTTPServer{srv: srv}
	lc.Append(fx.Hook{
		OnStart: func(ctx context.Context) error {
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return fmt.Errorf("listen on %s: %w", addr, err)
			}
			s.ln = ln
			go func() {
				if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
					log.Error("HTTP server stopped", "addr", addr, "error", err)
				}
			}()
			return nil
		},
		OnStop: func(ctx context.Context) error { return s.srv.Shutdown(ctx) },
	})
	return s
}

// APIServer is the HTTP API's server.
type APIServer struct{ *HTTPServer }

// apiModule serves the HTTP API with /metrics on ListenAddr.
var apiModule = fx.Module("api",
	fx.Provide(newWarmedIngest, newAPIServer),
	fx.Invoke(func(*APIServer) {}),
)

func newAPIServer(lc fx.Lifecycle, cfg Config, log *slog.Logger, reg *prometheus.Registry, m *metrics.Metrics,
	ingest *application.Ingest, subs *application.Subscriptions, events *application.Events,
	deliveries *application.Deliveries, ready Ready, warnings readyWarnings, _ warmedIngest,
) *APIServer {
	mux := http.NewServeMux()
	api := httpapi.New(mux, httpapi.Config{Version: Version, APIKeys: cfg.APIKeys,
		MaxEventBytes: cfg.MaxEventBytes, MaxBodyBytes: cfg.MaxBodyBytes, RequestTimeout: cfg.RequestTimeout},
		httpapi.UseCases{Ingest: ingest, Subscriptions: subs, Events: events, Deliveries: deliveries, Ready: ready,
			ReadyWarnings: warnings, EventAccepted: m.EventReceived}, log)
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return &APIServer{serve(lc, cfg.ListenAddr, httpapi.NewServer(api, mux, log), log)}
}

// adminModule serves /health, /ready and /metrics for worker and scheduler
// when AdminAddr is set.
var adminModule = fx.Module("admin",
	fx.Invoke(func(lc fx.Lifecycle, cfg Config, log *slog.Logger, reg *prometheus.Registry, ready Ready, warnings readyWarnings) {
		if cfg.AdminAddr == "" {
			return
		}
		mux := http.NewServeMux()
		mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"status":"ok"}`))
		})
		mux.HandleFunc("GET /ready", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			if err := ready(r.Context()); err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = fmt.Fprintf(w, `{"status":"unavailable","detail":%q}`, err.Error())
				return
			}
			_ = json.NewEncoder(w).Encode(struct {
				Status   string   `json:"status"`
				Warnings []string `json:"warnings,omitempty"`
			}{"ok", warnings})
		})
		mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		serveHTTP(lc, cfg.AdminAddr, mux, log)
	}),
)

// consumerName names this process within consumer groups.
func consumerName(role string) string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = crand.Read(b[:])
	return fmt.Sprintf("%s-%s-%d-%s", role, host, os.Getpid(), hex.EncodeToString(b[:]))
}

// redactURL hides a password in a connection URL before it is logged.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}
