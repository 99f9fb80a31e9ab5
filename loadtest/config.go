package loadtest

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/dispatch-webhooks/dispatch/bootstrap"
)

// Defaults of a run without --workload.
const (
	DefaultEvents        = 1000
	DefaultPublishers    = 16
	DefaultSubscriptions = 1
	DefaultPayloadBytes  = 1024
	DefaultWorkers       = 1
	// DefaultMaxInFlight and DefaultRateLimit are the largest values a
	// subscription accepts, so that its protections do not cap what is
	// measured unless a workload sets them (W5 does).
	DefaultMaxInFlight = 1000
	DefaultRateLimit   = 10000
	// DefaultPublishCap bounds publishing when only --events is given.
	DefaultPublishCap = 2 * time.Minute
	// DefaultDrainTimeout bounds the wait for deliveries after publishing;
	// DefaultDrainStall ends it early once nothing has arrived for that
	// long (longer than an open circuit's 30 s, so retries get their turn).
	DefaultDrainTimeout = 2 * time.Minute
	DefaultDrainStall   = 35 * time.Second
	// MaxIdleSubscriptions bounds Config.IdleSubscriptions.
	MaxIdleSubscriptions = 200_000
	// EventType is the type of every event published; every subscription
	// matches it through LoadEventTypes.
	EventType = "load.test"
)

// LoadEventTypes are the event types of the subscriptions the tool creates.
var LoadEventTypes = []string{"load.*"}

// Config is one run's workload and where it runs.
type Config struct {
	// Workload names the standard workload these settings came from, if
	// any; it is only reported.
	Workload string `json:"workload,omitempty"`

	// Target is the base URL of a running deployment's API; empty starts
	// one in process. It must be on a loopback address: the receiver
	// listens on 127.0.0.1, so the deployment's workers must share the host.
	Target string `json:"target,omitempty"`
	// APIKey is a bearer key of the target deployment.
	APIKey string `json:"-"`

	// DatabaseURL names the PostgreSQL server on which an in-process run
	// creates (and drops) a database of its own.
	DatabaseURL string `json:"-"`
	// RedisURL is the Redis an in-process run uses under a key prefix of
	// its own, deleted at the end.
	RedisURL string `json:"-"`
	// Queue is the queue adapter of the roles an in-process run starts
	// (DISPATCH_QUEUE); empty is Dispatch's default.
	Queue string `json:"queue,omitempty"`
	// QueuePartitions sets DISPATCH_QUEUE_PARTITIONS; 0 keeps Dispatch's
	// default.
	QueuePartitions int `json:"queue_partitions,omitempty"`
	// NATSURL and KafkaBrokers are the brokers of those queues.
	NATSURL      string `json:"-"`
	KafkaBrokers string `json:"-"`
	// Workers is how many `dispatch worker` processes an in-process run
	// starts; 0 runs one worker inside this process instead.
	Workers int `json:"workers"`
	// Processes runs api and scheduler as processes of the dispatch
	// binary too, as a deployment runs them, instead of inside the tool:
	// the tool's CPU is then its generator's and receiver's alone, and the
	// CPU per event counts Dispatch's processes and nothing else.
	Processes bool `json:"processes,omitempty"`
	// DispatchBin is the dispatch binary for worker processes; empty
	// builds it once with `go build` into a temporary directory.
	DispatchBin string `json:"-"`
	// WorkerConcurrency sets DISPATCH_WORKER_CONCURRENCY of the workers;
	// 0 keeps Dispatch's default.
	WorkerConcurrency int `json:"worker_concurrency,omitempty"`
	// LogLevel is the log level of the Dispatch roles the tool starts.
	LogLevel string `json:"-"`
	// RoleEnv is extra environment (KEY=VALUE) for the Dispatch roles
	// the tool starts as processes, after and so over its own settings;
	// the in-process roles take none, so it needs Processes.
	RoleEnv []string `json:"role_env,omitempty"`
	// SampleEvery, when positive, samples table sizes, process RSS and
	// the interval's delivery latency that often while the run publishes
	// and drains (Report.Samples): a soak's figures.
	SampleEvery time.Duration `json:"sample_every,omitempty"`

	// Events is how many events to publish; 0 publishes until Duration.
	Events int `json:"events,omitempty"`
	// Duration bounds publishing; 0 means DefaultPublishCap when Events
	// is set.
	Duration time.Duration `json:"duration,omitempty"`
	// Rate is the target publish rate in events/s over all publishers;
	// 0 publishes as fast as the publishers go.
	Rate float64 `json:"rate"`
	// Publishers is how many publishes are in flight at most.
	Publishers int `json:"publishers"`
	// Subscriptions is how many subscriptions match every event (fan-out),
	// each at its own path of the receiver; 0 measures ingest only.
	Subscriptions int `json:"subscriptions"`
	// FailingSubscriptions of the Subscriptions have an endpoint that
	// answers every request 500, and HangingSubscriptions one that never
	// answers (Dispatch's timeout ends each request): the hostile mix.
	// Delivery figures count the other, healthy, subscriptions only.
	FailingSubscriptions int `json:"failing_subscriptions,omitempty"`
	HangingSubscriptions int `json:"hanging_subscriptions,omitempty"`
	// IdleSubscriptions are created besides Subscriptions with event types
	// no event of the run has: the cost of many subscriptions that do not
	// match.
	IdleSubscriptions int `json:"idle_subscriptions,omitempty"`
	// SubscriptionTimeout is each subscription's timeout; 0 keeps
	// Dispatch's default.
	SubscriptionTimeout time.Duration `json:"subscription_timeout,omitempty"`
	// PayloadBytes is the size of each event's data object.
	PayloadBytes int `json:"payload_bytes"`
	// ReceiverLatency is how long the receiver takes to answer.
	ReceiverLatency time.Duration `json:"receiver_latency,omitempty"`
	// ReceiverFailureRate is the share of requests (0..1) the receiver
	// answers 500.
	ReceiverFailureRate float64 `json:"receiver_failure_rate,omitempty"`
	// MaxInFlight and RateLimit are the subscriptions' max_in_flight and
	// rate_limit.
	MaxInFlight int `json:"max_in_flight"`
	RateLimit   int `json:"rate_limit"`
	// VerifySample is the share of requests (0..1) whose signature the
	// receiver verifies.
	VerifySample float64 `json:"verify_sample"`
	// DrainTimeout bounds the wait for deliveries once publishing ends;
	// DrainStall ends it sooner when nothing arrives for that long.
	DrainTimeout time.Duration `json:"drain_timeout"`
	DrainStall   time.Duration `json:"drain_stall"`
}

// DefaultConfig returns the settings of a run given no flags.
func DefaultConfig() Config {
	return Config{
		DatabaseURL:   bootstrap.DefaultDatabaseURL,
		RedisURL:      bootstrap.DefaultRedisURL,
		NATSURL:       bootstrap.DefaultNATSURL,
		KafkaBrokers:  bootstrap.DefaultKafkaBroker,
		Workers:       DefaultWorkers,
		LogLevel:      "error",
		Events:        DefaultEvents,
		Publishers:    DefaultPublishers,
		Subscriptions: DefaultSubscriptions,
		PayloadBytes:  DefaultPayloadBytes,
		MaxInFlight:   DefaultMaxInFlight,
		RateLimit:     DefaultRateLimit,
		VerifySample:  1,
		DrainTimeout:  DefaultDrainTimeout,
		DrainStall:    DefaultDrainStall,
	}
}

// PublishLimit is how long publishing may last.
func (c Config) PublishLimit() time.Duration {
	if c.Duration > 0 {
		return c.Duration
	}
	return DefaultPublishCap
}

// Healthy is how many of the subscriptions answer every request at once:
// the ones the delivery figures count.
func (c Config) Healthy() int {
	return c.Subscriptions - c.FailingSubscriptions - c.HangingSubscriptions
}

// Flags registers the workload and deployment settings on fs, with c's
// values as defaults. DATABASE_URL and REDIS_URL, when set, replace the
// defaults of --database-url and --redis-url, as for dispatch itself.
func (c *Config) Flags(fs *flag.FlagSet) {
	fs.StringVar(&c.Target, "target", c.Target, "base URL of a running deployment's API on a loopback address (default: start one in process)")
	fs.StringVar(&c.APIKey, "api-key", c.APIKey, "API key of --target")
	fs.StringVar(&c.DatabaseURL, "database-url", c.DatabaseURL, "PostgreSQL server on which an in-process run creates and drops a database of its own ($DATABASE_URL)")
	fs.StringVar(&c.RedisURL, "redis-url", c.RedisURL, "Redis an in-process run uses under a key prefix of its own ($REDIS_URL)")
	fs.StringVar(&c.Queue, "queue", c.Queue, "queue adapter of the roles started, as DISPATCH_QUEUE (default: Dispatch's)")
	fs.IntVar(&c.QueuePartitions, "queue-partitions", c.QueuePartitions, "DISPATCH_QUEUE_PARTITIONS of the roles started (0: Dispatch's default)")
	fs.StringVar(&c.NATSURL, "nats-url", c.NATSURL, "NATS server of --queue nats ($NATS_URL)")
	fs.StringVar(&c.KafkaBrokers, "kafka-brokers", c.KafkaBrokers, "comma-separated Kafka seed brokers of --queue kafka ($KAFKA_BROKERS)")
	fs.BoolVar(&c.Processes, "processes", c.Processes, "run api and scheduler as processes of the dispatch binary too, not inside the tool (CPU per event then counts Dispatch alone)")
	fs.IntVar(&c.Workers, "workers", c.Workers, "worker processes to start (0: one worker inside this process)")
	fs.StringVar(&c.DispatchBin, "dispatch-bin", c.DispatchBin, "dispatch binary for worker processes (default: go build it into a temporary directory)")
	fs.IntVar(&c.WorkerConcurrency, "worker-concurrency", c.WorkerConcurrency, "DISPATCH_WORKER_CONCURRENCY of the workers (0: Dispatch's default)")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "log level of the Dispatch roles started")
	fs.Func("role-env", "KEY=VALUE added to the environment of the Dispatch processes started (repeatable; needs --processes), e.g. DISPATCH_RETENTION=3m", func(v string) error {
		c.RoleEnv = append(c.RoleEnv, v)
		return nil
	})
	fs.DurationVar(&c.SampleEvery, "sample-every", c.SampleEvery, "while publishing and draining, sample table sizes, process RSS and delivery latency this often (0: off), e.g. 1m for a soak")
	fs.IntVar(&c.Events, "events", c.Events, "events to publish (0, or --duration given without it: publish for --duration)")
	fs.DurationVar(&c.Duration, "duration", c.Duration, "how long to publish at most (0: "+DefaultPublishCap.String()+" when --events is set)")
	fs.Float64Var(&c.Rate, "rate", c.Rate, "target publish rate in events/s (0: as fast as the publishers go)")
	fs.IntVar(&c.Publishers, "publishers", c.Publishers, "concurrent publishers")
	fs.IntVar(&c.Subscriptions, "subscriptions", c.Subscriptions, "subscriptions matching every event (fan-out), each on its own receiver path")
	fs.IntVar(&c.FailingSubscriptions, "failing-subscriptions", c.FailingSubscriptions, "of --subscriptions, how many have an endpoint answering every request 500")
	fs.IntVar(&c.HangingSubscriptions, "hanging-subscriptions", c.HangingSubscriptions, "of --subscriptions, how many have an endpoint that never answers (the subscription's timeout ends each request)")
	fs.IntVar(&c.IdleSubscriptions, "idle-subscriptions", c.IdleSubscriptions, "subscriptions created besides --subscriptions whose event types match no event of the run")
	fs.DurationVar(&c.SubscriptionTimeout, "subscription-timeout", c.SubscriptionTimeout, "timeout of each subscription (0: Dispatch's default)")
	fs.IntVar(&c.PayloadBytes, "payload", c.PayloadBytes, "bytes of each event's data object")
	fs.DurationVar(&c.ReceiverLatency, "receiver-latency", c.ReceiverLatency, "how long the receiver takes to answer")
	fs.Float64Var(&c.ReceiverFailureRate, "receiver-failure-rate", c.ReceiverFailureRate, "share of requests (0..1) the receiver answers 500")
	fs.IntVar(&c.MaxInFlight, "max-in-flight", c.MaxInFlight, "max_in_flight of each subscription")
	fs.IntVar(&c.RateLimit, "rate-limit", c.RateLimit, "rate_limit (requests/s) of each subscription")
	fs.Float64Var(&c.VerifySample, "verify-sample", c.VerifySample, "share of requests (0..1) whose signature the receiver verifies")
	fs.DurationVar(&c.DrainTimeout, "drain-timeout", c.DrainTimeout, "longest wait for deliveries after publishing; what has not arrived by then is lost")
	fs.DurationVar(&c.DrainStall, "drain-stall", c.DrainStall, "stop waiting sooner once nothing has arrived for this long")
	fs.BoolFunc("ingest-only", "no subscriptions: measure durable ingest alone (same as --subscriptions 0)", func(v string) error {
		on, err := strconv.ParseBool(v)
		if on {
			c.Subscriptions = 0
		}
		return err
	})
}

// Validate reports every setting out of range.
func (c Config) Validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	if c.Target != "" {
		errs = append(errs, checkLoopback(c.Target))
		check(c.APIKey != "", "--api-key is required with --target")
		check(c.Queue == "" && c.QueuePartitions == 0, "--queue and --queue-partitions are the target deployment's own: set them there, not with --target")
		check(len(c.RoleEnv) == 0, "--role-env is for the roles the tool starts: set the target deployment's environment there, not with --target")
		check(c.SampleEvery == 0, "--sample-every reads the run's own database and processes: it cannot sample a --target deployment")
	} else {
		check(c.DatabaseURL != "", "--database-url must be set")
		check(c.RedisURL != "", "--redis-url must be set")
		check(c.Workers >= 0 && c.Workers <= 64, "--workers must be 0..64, got %d", c.Workers)
		check(!c.Processes || c.Workers > 0, "--processes runs every role as a process: --workers must be at least 1")
		check(len(c.RoleEnv) == 0 || c.Processes, "--role-env needs --processes: api and scheduler in the tool's process take no environment of their own")
		check(c.QueuePartitions >= 0 && c.QueuePartitions <= bootstrap.MaxQueuePartitions, "--queue-partitions must be 0..%d, got %d", bootstrap.MaxQueuePartitions, c.QueuePartitions)
	}
	check(c.WorkerConcurrency >= 0 && c.WorkerConcurrency <= 10000, "--worker-concurrency must be 0..10000, got %d", c.WorkerConcurrency)
	check(c.Events >= 0, "--events must not be negative, got %d", c.Events)
	check(c.Duration >= 0, "--duration must not be negative, got %s", c.Duration)
	check(c.Events > 0 || c.Duration > 0, "set --events or --duration")
	check(c.Rate >= 0, "--rate must not be negative, got %g", c.Rate)
	check(c.Publishers >= 1 && c.Publishers <= 4096, "--publishers must be 1..4096, got %d", c.Publishers)
	check(c.Subscriptions >= 0 && c.Subscriptions <= 1000, "--subscriptions must be 0..1000, got %d", c.Subscriptions)
	check(c.FailingSubscriptions >= 0 && c.HangingSubscriptions >= 0, "--failing-subscriptions and --hanging-subscriptions must not be negative")
	check(c.Subscriptions == 0 || c.FailingSubscriptions+c.HangingSubscriptions < c.Subscriptions,
		"--failing-subscriptions (%d) and --hanging-subscriptions (%d) must leave at least one of --subscriptions (%d) healthy",
		c.FailingSubscriptions, c.HangingSubscriptions, c.Subscriptions)
	check(c.IdleSubscriptions >= 0 && c.IdleSubscriptions <= MaxIdleSubscriptions, "--idle-subscriptions must be 0..%d, got %d", MaxIdleSubscriptions, c.IdleSubscriptions)
	check(c.SubscriptionTimeout == 0 || (c.SubscriptionTimeout >= time.Millisecond && c.SubscriptionTimeout <= time.Minute),
		"--subscription-timeout must be 0 or 1ms..1m, got %s", c.SubscriptionTimeout)
	check(c.PayloadBytes >= 32 && c.PayloadBytes <= 200<<10, "--payload must be 32..%d bytes, got %d", 200<<10, c.PayloadBytes)
	check(c.ReceiverLatency >= 0 && c.ReceiverLatency <= 10*time.Second, "--receiver-latency must be 0..10s, got %s", c.ReceiverLatency)
	check(c.ReceiverFailureRate >= 0 && c.ReceiverFailureRate <= 1, "--receiver-failure-rate must be 0..1, got %g", c.ReceiverFailureRate)
	check(c.MaxInFlight >= 1 && c.MaxInFlight <= 1000, "--max-in-flight must be 1..1000, got %d", c.MaxInFlight)
	check(c.RateLimit >= 1 && c.RateLimit <= 10000, "--rate-limit must be 1..10000, got %d", c.RateLimit)
	check(c.VerifySample >= 0 && c.VerifySample <= 1, "--verify-sample must be 0..1, got %g", c.VerifySample)
	check(c.DrainTimeout > 0, "--drain-timeout must be positive, got %s", c.DrainTimeout)
	check(c.DrainStall > 0, "--drain-stall must be positive, got %s", c.DrainStall)
	check(c.SampleEvery == 0 || c.SampleEvery >= time.Second, "--sample-every must be 0 (off) or at least 1s, got %s", c.SampleEvery)
	for _, kv := range c.RoleEnv {
		errs = append(errs, checkRoleEnv(kv))
	}
	return errors.Join(errs...)
}

// checkLoopback refuses a target that is not on a loopback address: the
// tool sends load only to this machine.
func checkLoopback(target string) error {
	u, err := url.Parse(target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("--target must be an http(s) URL such as http://127.0.0.1:8080, got %q", target)
	}
	host := u.Hostname()
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("--target must be on a loopback address (127.0.0.0/8, ::1, localhost): the receiver listens on 127.0.0.1, got %q", host)
	}
	return nil
}

// checkRoleEnv refuses a --role-env that is not KEY=VALUE with KEY a
// shell-style variable name.
func checkRoleEnv(kv string) error {
	key, _, ok := strings.Cut(kv, "=")
	if !ok {
		return fmt.Errorf("--role-env must be KEY=VALUE, got %q (no '=')", kv)
	}
	if key == "" {
		return fmt.Errorf("--role-env must be KEY=VALUE, got %q (empty KEY)", kv)
	}
	for i, ch := range key {
		if ch != '_' && (ch < 'A' || ch > 'Z') && (ch < 'a' || ch > 'z') && (i == 0 || ch < '0' || ch > '9') {
			return fmt.Errorf("--role-env KEY must be letters, digits and _ not starting with a digit, got %q", key)
		}
	}
	return nil
}
