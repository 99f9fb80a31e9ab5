package bootstrap

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dispatch-webhooks/dispatch/adapters/httpapi"
	"github.com/dispatch-webhooks/dispatch/adapters/nats"
	"github.com/dispatch-webhooks/dispatch/adapters/webhook"
	"github.com/dispatch-webhooks/dispatch/application"
	"github.com/dispatch-webhooks/dispatch/domain"
)

// Defaults of SPEC §7.
const (
	DefaultDatabaseURL    = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	DefaultRedisURL       = "redis://127.0.0.1:6379/0"
	DefaultListenAddr     = "127.0.0.1:8080"
	DefaultRedisKeyPrefix = "dispatch:"
	DefaultPollInterval   = time.Second
	// DefaultConcurrency is 1,024 rather than a few hundred because a
	// delivery's way from its claim to its endpoint's answer passes through
	// batches (the claim's, the protection's) that fill as more deliveries
	// wait in them: under load that way takes tens of milliseconds, and with
	// 256 deliveries at once a worker could not keep two cores busy (W4 and
	// W3 delivered about 10 % more at 1,024, and one worker kept pace with
	// ingest in W3 instead of falling behind it). It costs memory: about
	// 30 MiB more of a worker's peak RSS.
	DefaultConcurrency   = 1024
	DefaultMaxEventBytes = 256 << 10
	// DefaultMaxBodyBytes and DefaultRequestTimeout are the API's own.
	DefaultMaxBodyBytes   = httpapi.DefaultMaxBodyBytes
	DefaultRequestTimeout = httpapi.DefaultRequestTimeout
	// MinAPIKeyLength is the shortest API key the API accepts: a shorter
	// one could be guessed.
	MinAPIKeyLength = 32
	// DefaultQueue is the queue adapter of DISPATCH_QUEUE.
	DefaultQueue = QueueRedis
	// DefaultQueuePartitions is how many partitions the delivery stream is
	// split into by subscription.
	DefaultQueuePartitions = 16
	// MaxQueuePartitions bounds QueuePartitions: each partition costs a
	// read (Redis stream, NATS subject, Kafka partition) in every worker.
	MaxQueuePartitions = 1024
	DefaultQueuePrefix = "dispatch"
	DefaultNATSURL     = "nats://127.0.0.1:4222"
	DefaultKafkaBroker = "127.0.0.1:9092"
)

// Queue adapters (DISPATCH_QUEUE).
const (
	// QueueRedis is Redis Streams, the default.
	QueueRedis = "redis"
	// QueueNATS is NATS JetStream, at NATS_URL.
	QueueNATS = "nats"
	// QueueKafka is Apache Kafka at KafkaBrokers.
	QueueKafka = "kafka"
)

// kafkaName is what Kafka accepts in a topic or group name.
var kafkaName = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// queues are the values DISPATCH_QUEUE takes.
var queues = []string{QueueRedis, QueueNATS, QueueKafka}

// Config is every setting of every role. Each field is a flag and a
// DISPATCH_* environment variable (DATABASE_URL and REDIS_URL keep their
// conventional names); a flag wins over the environment.
type Config struct {
	// DatabaseURL is the PostgreSQL connection string.
	DatabaseURL string
	// RedisURL is the Redis URL; its DB index is honoured.
	RedisURL string
	// RedisKeyPrefix starts every Redis key, so deployments can share a Redis.
	RedisKeyPrefix string
	// RedisCluster says RedisURL is go-redis's cluster URL
	// (redis://h1:p1?addr=h2:p2&addr=h3:p3).
	RedisCluster bool
	// Queue is the adapter carrying the work: one of queues. Protections
	// stay in Redis whichever it is.
	Queue string
	// QueuePartitions is how many partitions the delivery stream is split
	// into, by subscription.
	QueuePartitions int
	// QueuePrefix starts every stream, subject, topic and consumer group
	// name of the queue, so deployments can share a broker. (On Redis,
	// RedisKeyPrefix starts every key.)
	QueuePrefix string
	// NATSURL is the NATS server of DISPATCH_QUEUE=nats.
	NATSURL string
	// KafkaBrokers are the Kafka seed brokers of DISPATCH_QUEUE=kafka.
	KafkaBrokers []string
	// ListenAddr is the HTTP address of the API (api, all, dev).
	ListenAddr string
	// AdminAddr serves /health, /ready and /metrics for worker and scheduler;
	// off when empty.
	AdminAddr string
	// APIKeys are the accepted bearer keys.
	APIKeys []string
	// AllowPrivateTargets lets subscriptions target loopback and private
	// addresses: every address the SSRF guard would refuse.
	AllowPrivateTargets bool
	// AllowedTargets are CIDR ranges (a single address is a /32 or /128)
	// that subscriptions may target although the SSRF guard refuses them,
	// such as 10.20.0.0/16 for endpoints on an internal network. Checked at
	// create/update and at every connection, like the guard itself.
	AllowedTargets []netip.Prefix
	// AttemptBodyBytes is how much of an endpoint's response body each
	// attempt keeps (0 keeps none).
	AttemptBodyBytes int
	// OutboundProxy is the HTTP (CONNECT) or SOCKS5 proxy every delivery
	// goes out through, for a fixed egress address; the zero value
	// connects to endpoints directly. The SSRF guard still checks the
	// endpoints' addresses, and the proxy is asked for them by address.
	OutboundProxy webhook.OutboundProxy
	// SchedulerPollInterval is the pause between scheduler scans; a tenth of
	// it after a scan that took a whole batch (application.Schedule.Run).
	SchedulerPollInterval time.Duration
	// SchedulerBatchSize bounds each scan.
	SchedulerBatchSize int
	// VisibilityTimeout is the idle time before an unacknowledged stream
	// entry, or an enqueued but unclaimed delivery, is handed out again.
	VisibilityTimeout time.Duration
	// WorkerConcurrency is how many deliveries one worker process attempts at
	// once.
	WorkerConcurrency int
	// InlineFanOutMax is the most deliveries an event may have to be fanned
	// out in its ingest transaction; 0 turns inline fan-out off.
	InlineFanOutMax int
	// FanOutMaxUnread is how many delivery-stream entries the workers may
	// have left to read before the fan-out stage waits for them; 0 never
	// waits (application.FanOut.MaxUnread).
	FanOutMaxUnread int64
	// MaxEventBytes bounds a publish request body.
	MaxEventBytes int64
	// MaxBodyBytes bounds the request body of every other route; checked
	// before any of it is read.
	MaxBodyBytes int64
	// RequestTimeout is the deadline of every API request, carried to
	// PostgreSQL through the request's context.
	RequestTimeout time.Duration
	// IdempotencyWindow is how long an idempotency key is remembered.
	IdempotencyWindow time.Duration
	// Retention is how long delivery history (events, deliveries,
	// attempts) is kept once terminal (SPEC §5).
	Retention time.Duration
	// SecretRotationOverlap is how long a rotated-out secret keeps signing.
	SecretRotationOverlap time.Duration
	// LogLevel is debug, info, warn or error.
	LogLevel string
	// BreakerFailureThreshold is how many consecutive failures open a
	// subscription's circuit.
	BreakerFailureThreshold int
	// BreakerOpenDuration is how long an open circuit refuses requests.
	BreakerOpenDuration time.Duration
	// BreakerHalfOpenProbes is how many requests a half-open circuit lets
	// through to test the endpoint.
	BreakerHalfOpenProbes int

	// EncryptionKeys is DISPATCH_ENCRYPTION_KEYS: comma-separated base64
	// 32-byte keys sealing subscriptions' secrets and custom headers in
	// PostgreSQL, the first sealing, every one opening (keyring.Parse);
	// empty stores them in plaintext, with a warning (see encryption.go).
	EncryptionKeys string

	envErr error
	// outboundProxyErr is why OutboundProxy's value was refused (proxyValue).
	outboundProxyErr error
	// asyncCommits is set by roles that write only state a database crash
	// may lose (worker, scheduler); see postgres.AsyncCommits.
	asyncCommits bool
}

// DefaultConfig returns the defaults, before flags and environment.
func DefaultConfig() Config {
	return Config{
		DatabaseURL:             DefaultDatabaseURL,
		RedisURL:                DefaultRedisURL,
		RedisKeyPrefix:          DefaultRedisKeyPrefix,
		Queue:                   DefaultQueue,
		QueuePartitions:         DefaultQueuePartitions,
		QueuePrefix:             DefaultQueuePrefix,
		NATSURL:                 DefaultNATSURL,
		KafkaBrokers:            []string{DefaultKafkaBroker},
		ListenAddr:              DefaultListenAddr,
		SchedulerPollInterval:   DefaultPollInterval,
		SchedulerBatchSize:      application.DefaultSchedulerBatchSize,
		VisibilityTimeout:       application.DefaultVisibilityTimeout,
		WorkerConcurrency:       DefaultConcurrency,
		InlineFanOutMax:         application.DefaultMaxInlineDeliveries,
		FanOutMaxUnread:         application.DefaultFanOutMaxUnread,
		MaxEventBytes:           DefaultMaxEventBytes,
		AttemptBodyBytes:        domain.DefaultResponseBody,
		MaxBodyBytes:            DefaultMaxBodyBytes,
		RequestTimeout:          DefaultRequestTimeout,
		IdempotencyWindow:       application.DefaultIdempotencyWindow,
		Retention:               domain.DefaultRetention,
		SecretRotationOverlap:   domain.DefaultRotationOverlap,
		LogLevel:                "info",
		BreakerFailureThreshold: domain.DefaultBreakerConfig().FailureThreshold,
		BreakerOpenDuration:     domain.DefaultBreakerConfig().OpenDuration,
		BreakerHalfOpenProbes:   domain.DefaultBreakerConfig().HalfOpenProbes,
	}
}

// envVar names the environment variable behind a flag.
func envVar(flagName string) string {
	switch flagName {
	case "database-url":
		return "DATABASE_URL"
	case "redis-url":
		return "REDIS_URL"
	case "nats-url":
		return "NATS_URL"
	case "kafka-brokers":
		return "KAFKA_BROKERS"
	}
	return "DISPATCH_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Flags registers every setting on fs, with defaults taken from c and then
// from the environment. An environment value that does not parse is an
// error, reported by Validate.
func (c *Config) Flags(fs *flag.FlagSet) {
	var envErrs []error
	str := func(p *string, name, usage string) {
		if v, ok := os.LookupEnv(envVar(name)); ok {
			*p = v
		}
		fs.StringVar(p, name, *p, usage+" ($"+envVar(name)+")")
	}
	parse := func(p flag.Value, name, usage string) {
		if v, ok := os.LookupEnv(envVar(name)); ok {
			if err := p.Set(v); err != nil {
				envErrs = append(envErrs, fmt.Errorf("$%s: %w", envVar(name), err))
			}
		}
		fs.Var(p, name, usage+" ($"+envVar(name)+")")
	}
	str(&c.DatabaseURL, "database-url", "PostgreSQL connection URL")
	str(&c.RedisURL, "redis-url", "Redis URL (the DB index is honoured)")
	str(&c.RedisKeyPrefix, "redis-key-prefix", "prefix of every Redis key")
	parse((*boolValue)(&c.RedisCluster), "redis-cluster", "redis-url is a Redis Cluster URL: redis://h1:p1?addr=h2:p2&addr=h3:p3")
	str(&c.Queue, "queue", "queue carrying the work: "+strings.Join(queues, ", "))
	parse((*intValue)(&c.QueuePartitions), "queue-partitions", "partitions of the delivery stream, by subscription")
	str(&c.QueuePrefix, "queue-prefix", "prefix of every stream, subject, topic and consumer group name of the queue")
	str(&c.NATSURL, "nats-url", "NATS server of the nats queue")
	parse((*listValue)(&c.KafkaBrokers), "kafka-brokers", "comma-separated Kafka seed brokers of the kafka queue")
	str(&c.ListenAddr, "listen-addr", "HTTP address of the API")
	str(&c.AdminAddr, "admin-addr", "address of /health, /ready, /metrics for worker and scheduler (off when empty)")
	parse((*listValue)(&c.APIKeys), "api-keys", "comma-separated accepted API keys")
	parse((*boolValue)(&c.AllowPrivateTargets), "allow-private-targets", "let subscriptions target loopback and private addresses")
	parse((*prefixListValue)(&c.AllowedTargets), "allowed-targets", "comma-separated CIDR ranges and IP addresses subscriptions may target although the SSRF guard refuses them")
	parse(proxyValue{&c.OutboundProxy, &c.outboundProxyErr}, "outbound-proxy", "proxy every delivery goes out through: http://[user:password@]host:port (CONNECT) or socks5://[user:password@]host:port (none: direct)")
	parse((*durationValue)(&c.SchedulerPollInterval), "scheduler-poll-interval", "pause between scheduler scans; a tenth of it after a scan that took a whole batch")
	parse((*intValue)(&c.SchedulerBatchSize), "scheduler-batch-size", "most rows one scheduler scan takes")
	parse((*durationValue)(&c.VisibilityTimeout), "visibility-timeout", "idle time before unacknowledged work is handed out again")
	parse((*intValue)(&c.AttemptBodyBytes), "attempt-body-bytes", "bytes of an endpoint's response body each attempt keeps (0: none)")
	parse((*intValue)(&c.WorkerConcurrency), "worker-concurrency", "deliveries one worker attempts at once, and the most connections it opens to one endpoint host")
	parse((*intValue)(&c.InlineFanOutMax), "inline-fanout-max", "most deliveries an event may have to be fanned out at ingest (0: always through the fan-out stage)")
	parse((*int64Value)(&c.FanOutMaxUnread), "fanout-max-unread", "delivery-stream entries the workers may have left to read before fan-out waits for them (0: never waits)")
	parse((*int64Value)(&c.MaxEventBytes), "max-event-bytes", "largest publish request body (bytes)")
	parse((*int64Value)(&c.MaxBodyBytes), "max-body-bytes", "largest request body of any route but publish (bytes)")
	parse((*durationValue)(&c.RequestTimeout), "request-timeout", "deadline of an API request, down to PostgreSQL")
	parse((*durationValue)(&c.IdempotencyWindow), "idempotency-window", "how long an idempotency key is remembered")
	parse((*durationValue)(&c.Retention), "retention", "how long delivery history is kept once terminal (at least 1m)")
	parse((*durationValue)(&c.SecretRotationOverlap), "secret-rotation-overlap", "how long a rotated-out signing secret keeps signing")
	str(&c.LogLevel, "log-level", "debug, info, warn or error")
	parse((*intValue)(&c.BreakerFailureThreshold), "breaker-failure-threshold", "consecutive failures that open a subscription's circuit")
	parse((*durationValue)(&c.BreakerOpenDuration), "breaker-open-duration", "how long an open circuit refuses requests")
	parse((*intValue)(&c.BreakerHalfOpenProbes), "breaker-half-open-probes", "requests a half-open circuit lets through")
	parse((*keysValue)(&c.EncryptionKeys), "encryption-keys", "comma-separated base64 32-byte keys sealing subscription secrets and headers at rest; the first seals, every one opens (none: plaintext)")
	c.envErr = errors.Join(envErrs...)
}

// Validate reports every setting that is out of range.
func (c *Config) Validate() error {
	errs := []error{c.envErr}
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(c.DatabaseURL != "", "database-url must be set")
	check(c.RedisURL != "", "redis-url must be set")
	check(slices.Contains(queues, c.Queue), "queue must be one of %s, got %q", strings.Join(queues, ", "), c.Queue)
	check(c.QueuePartitions >= 1 && c.QueuePartitions <= MaxQueuePartitions, "queue-partitions must be 1..%d, got %d", MaxQueuePartitions, c.QueuePartitions)
	check(c.QueuePrefix != "", "queue-prefix must be set")
	// Braces would break the Redis hash tags the prefixes come before or in.
	check(!strings.ContainsAny(c.QueuePrefix, "{}"), "queue-prefix must not contain '{' or '}', got %q", c.QueuePrefix)
	check(!strings.ContainsAny(c.RedisKeyPrefix, "{}"), "redis-key-prefix must not contain '{' or '}', got %q", c.RedisKeyPrefix)
	if c.Queue == QueueKafka {
		check(len(c.KafkaBrokers) > 0, "kafka-brokers must be set for the kafka queue")
		for _, b := range c.KafkaBrokers {
			_, port, err := net.SplitHostPort(b)
			check(err == nil && port != "", "kafka-brokers must be host:port, got %q", b)
		}
		check(kafkaName.MatchString(c.QueuePrefix), "queue-prefix must be letters, digits, '.', '_' and '-' for the kafka queue, got %q", c.QueuePrefix)
	}
	if c.Queue == QueueNATS {
		check(c.NATSURL != "", "nats-url must be set for the nats queue")
		if err := (nats.QueueOptions{Prefix: c.QueuePrefix}).Validate(); err != nil && c.QueuePrefix != "" {
			errs = append(errs, fmt.Errorf("queue-prefix: %w", err))
		}
	}
	check(c.SchedulerPollInterval >= time.Millisecond, "scheduler-poll-interval must be at least 1ms, got %s", c.SchedulerPollInterval)
	check(c.SchedulerBatchSize >= 1 && c.SchedulerBatchSize <= 10000, "scheduler-batch-size must be 1..10000, got %d", c.SchedulerBatchSize)
	check(c.VisibilityTimeout >= 10*time.Millisecond, "visibility-timeout must be at least 10ms, got %s", c.VisibilityTimeout)
	check(c.WorkerConcurrency >= 1 && c.WorkerConcurrency <= 10000, "worker-concurrency must be 1..10000, got %d", c.WorkerConcurrency)
	check(c.AttemptBodyBytes >= 0 && c.AttemptBodyBytes <= domain.MaxResponseBody, "attempt-body-bytes must be 0..%d, got %d", domain.MaxResponseBody, c.AttemptBodyBytes)
	check(c.MaxEventBytes >= 1024, "max-event-bytes must be at least 1024, got %d", c.MaxEventBytes)
	check(c.MaxBodyBytes >= 1024, "max-body-bytes must be at least 1024, got %d", c.MaxBodyBytes)
	check(c.RequestTimeout >= 10*time.Millisecond, "request-timeout must be at least 10ms, got %s", c.RequestTimeout)
	for i, k := range c.APIKeys {
		// Never the key itself: the message goes to the log.
		check(len(k) >= MinAPIKeyLength, "api-keys: key %d of %d is %d characters long, want at least %d ($DISPATCH_API_KEYS)",
			i+1, len(c.APIKeys), len(k), MinAPIKeyLength)
	}
	check(c.InlineFanOutMax >= 0 && c.InlineFanOutMax <= 1000, "inline-fanout-max must be 0..1000, got %d", c.InlineFanOutMax)
	check(c.FanOutMaxUnread >= 0, "fanout-max-unread must be at least 0, got %d", c.FanOutMaxUnread)
	check(c.IdempotencyWindow >= time.Minute, "idempotency-window must be at least 1m, got %s", c.IdempotencyWindow)
	check(c.Retention >= domain.MinRetention, "retention must be at least 1m, got %s", c.Retention)
	check(c.SecretRotationOverlap >= 0 && c.SecretRotationOverlap <= 30*24*time.Hour,
		"secret-rotation-overlap must be 0..720h, got %s", c.SecretRotationOverlap)
	_, err := c.slogLevel()
	errs = append(errs, err)
	if err := c.Breaker().Validate(); err != nil {
		errs = append(errs, fmt.Errorf("breaker: %w", err))
	}
	if err := c.TargetPolicy().Validate(); err != nil {
		errs = append(errs, fmt.Errorf("allowed-targets: %w", err))
	}
	if c.outboundProxyErr != nil { // never the value: it may hold a password
		errs = append(errs, fmt.Errorf("outbound-proxy ($DISPATCH_OUTBOUND_PROXY): %w", c.outboundProxyErr))
	}
	errs = append(errs, c.encryptionKeysError())
	return errors.Join(errs...)
}

// TargetPolicy returns the SSRF guard's policy, shared by the create/update
// check of subscription URLs and the delivery client's dialer.
func (c *Config) TargetPolicy() webhook.Policy {
	return webhook.Policy{AllowPrivate: c.AllowPrivateTargets, Allowed: c.AllowedTargets}
}

// Breaker returns the circuit-breaker settings.
func (c *Config) Breaker() domain.BreakerConfig {
	return domain.BreakerConfig{
		FailureThreshold: c.BreakerFailureThreshold,
		OpenDuration:     c.BreakerOpenDuration,
		HalfOpenProbes:   c.BreakerHalfOpenProbes,
	}
}

func (c *Config) slogLevel() (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(c.LogLevel)); err != nil {
		return 0, fmt.Errorf("log-level must be debug, info, warn or error, got %q", c.LogLevel)
	}
	return l, nil
}

type listValue []string

func (v *listValue) String() string { return strings.Join(*v, ",") }
func (v *listValue) Set(s string) error {
	*v = nil
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			*v = append(*v, part)
		}
	}
	return nil
}

// prefixListValue parses with webhook.ParseAllowedTargets: strictly, since
// a typo would change what the SSRF guard lets through.
type prefixListValue []netip.Prefix

func (v *prefixListValue) String() string {
	parts := make([]string, len(*v))
	for i, p := range *v {
		parts[i] = p.String()
	}
	return strings.Join(parts, ",")
}
func (v *prefixListValue) Set(s string) error {
	prefixes, err := webhook.ParseAllowedTargets(s)
	if err != nil {
		return err
	}
	*v = prefixes
	return nil
}

// proxyValue parses with webhook.ParseOutboundProxy. Set never fails, and
// keeps the error for Validate instead: the flag package would quote the
// refused value, password included.
type proxyValue struct {
	proxy *webhook.OutboundProxy
	err   *error
}

func (v proxyValue) String() string {
	if v.proxy == nil { // the flag package's zero value
		return ""
	}
	return v.proxy.String()
}
func (v proxyValue) Set(s string) error {
	*v.proxy, *v.err = webhook.ParseOutboundProxy(s)
	return nil
}

type boolValue bool

func (v *boolValue) String() string   { return strconv.FormatBool(bool(*v)) }
func (v *boolValue) IsBoolFlag() bool { return true }
func (v *boolValue) Set(s string) error {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return fmt.Errorf("want true or false, got %q", s)
	}
	*v = boolValue(b)
	return nil
}

type durationValue time.Duration

func (v *durationValue) String() string { return time.Duration(*v).String() }
func (v *durationValue) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("want a duration such as 1s or 500ms, got %q", s)
	}
	*v = durationValue(d)
	return nil
}

type intValue int

func (v *intValue) String() string { return strconv.Itoa(int(*v)) }
func (v *intValue) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil {
		return fmt.Errorf("want a whole number, got %q", s)
	}
	*v = intValue(n)
	return nil
}

type int64Value int64

func (v *int64Value) String() string { return strconv.FormatInt(int64(*v), 10) }
func (v *int64Value) Set(s string) error {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return fmt.Errorf("want a whole number, got %q", s)
	}
	*v = int64Value(n)
	return nil
}
