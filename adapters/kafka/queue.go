package kafka

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dispatch-webhooks/dispatch/ports"
)

var _ ports.Queue = (*Queue)(nil)

// Defaults of Options.
const (
	// DefaultPrefix starts every topic and consumer group name.
	DefaultPrefix = "dispatch"
	// DefaultPartitions is how many partitions a topic is created with.
	DefaultPartitions = 16
	// DefaultSessionTimeout is how long the group waits for a silent
	// process before its partitions, and its unacknowledged entries, go to
	// the others.
	DefaultSessionTimeout = 10 * time.Second
	// DefaultHeartbeatInterval is how often a process tells its groups it
	// is alive, and so how soon it joins a rebalance.
	DefaultHeartbeatInterval = time.Second
)

// catchUpWait bounds how long a Read waits for entries that are already in
// a partition it owns but not yet fetched, whatever its block; and
// assignWait how long it waits for a group it just joined to give it
// partitions. Both matter only to a Read whose block ran out.
const (
	catchUpWait = 2 * time.Second
	assignWait  = time.Second
)

// defaultReclaimCount is Reclaim's count when the caller asks for <= 0.
const defaultReclaimCount = 100

// Options configures a Queue.
type Options struct {
	// Brokers are the seed brokers (host:port); at least one.
	Brokers []string
	// Prefix starts every topic and group name, so deployments can share a
	// cluster. "" means DefaultPrefix.
	Prefix string
	// Partitions is how many partitions a topic is created with; 0 means
	// DefaultPartitions. A topic that exists keeps its partitions.
	Partitions int
	// SessionTimeout and HeartbeatInterval tune the consumer groups; 0
	// means DefaultSessionTimeout and DefaultHeartbeatInterval.
	SessionTimeout, HeartbeatInterval time.Duration
	// Now is the clock of Reclaim's idle times; nil means time.Now. Tests
	// move it instead of waiting.
	Now func() time.Time
}

// Validate reports the first invalid option.
func (o Options) Validate() error {
	if len(o.Brokers) == 0 {
		return errors.New("kafka: at least one broker is needed")
	}
	for _, b := range o.Brokers {
		if strings.TrimSpace(b) == "" {
			return fmt.Errorf("kafka: empty broker address in %q", o.Brokers)
		}
	}
	if o.Partitions < 0 {
		return fmt.Errorf("kafka: partitions must be at least 1, got %d", o.Partitions)
	}
	if strings.ContainsFunc(o.Prefix, func(r rune) bool { return !topicRune(r) }) {
		return fmt.Errorf("kafka: prefix %q may hold only letters, digits, '.', '_' and '-'", o.Prefix)
	}
	return nil
}

// topicRune reports whether Kafka accepts r in a topic name.
func topicRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-'
}

// Queue is ports.Queue on Kafka; see the package documentation. Close it
// when done: that leaves its consumer groups, handing its partitions to the
// other processes at once. Safe for concurrent use.
type Queue struct {
	brokers    []string
	prefix     string
	partitions int32
	session    time.Duration
	heartbeat  time.Duration
	now        func() time.Time

	// client produces records and carries admin requests (admin).
	client *kgo.Client
	admin  *kadm.Client
	// topics holds the topics known to exist.
	topics sync.Map

	mu      sync.Mutex
	members map[string]*member
	closed  bool
}

// New connects to opts.Brokers. It does not wait for them: Ping does.
func New(opts Options) (*Queue, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	q := &Queue{
		brokers:    opts.Brokers,
		prefix:     opts.Prefix,
		partitions: int32(opts.Partitions),
		session:    opts.SessionTimeout,
		heartbeat:  opts.HeartbeatInterval,
		now:        opts.Now,
		members:    make(map[string]*member),
	}
	if q.prefix == "" {
		q.prefix = DefaultPrefix
	}
	if q.partitions == 0 {
		q.partitions = DefaultPartitions
	}
	if q.session <= 0 {
		q.session = DefaultSessionTimeout
	}
	if q.heartbeat <= 0 {
		q.heartbeat = DefaultHeartbeatInterval
	}
	if q.now == nil {
		q.now = time.Now
	}
	client, err := kgo.NewClient(kgo.SeedBrokers(opts.Brokers...))
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	q.client, q.admin = client, kadm.NewClient(client)
	return q, nil
}

// Close leaves every consumer group, committing what was acknowledged, and
// closes the connections. Entries still unacknowledged go to whichever
// process owns their partition next.
func (q *Queue) Close() {
	q.mu.Lock()
	q.closed = true
	members := q.members
	q.members = map[string]*member{}
	q.mu.Unlock()
	var wg sync.WaitGroup
	for _, m := range members {
		wg.Go(m.client.Close)
	}
	wg.Wait()
	q.client.Close()
}

// topic is the topic of stream.
func (q *Queue) topic(stream string) string { return q.prefix + "." + stream }

// group is the consumer group of a port group on stream.
func (q *Queue) group(stream, group string) string { return q.prefix + "." + stream + "." + group }

// ensureTopic creates topic with the queue's partitions unless it is known
// to exist.
func (q *Queue) ensureTopic(ctx context.Context, topic string) error {
	if _, ok := q.topics.Load(topic); ok {
		return nil
	}
	resp, err := q.admin.CreateTopic(ctx, q.partitions, -1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	q.topics.Store(topic, struct{}{})
	return nil
}

// Publish produces entries to stream's topic, each keyed by its Key, and
// returns once the brokers acknowledged all of them. Entries of one key go
// to one partition in order (franz-go's default partitioner hashes keys as
// Kafka's Java client does); an empty key is a key too, so unkeyed entries
// keep their order.
func (q *Queue) Publish(ctx context.Context, stream string, entries ...ports.Entry) error {
	if len(entries) == 0 {
		return nil
	}
	topic := q.topic(stream)
	if err := q.ensureTopic(ctx, topic); err != nil {
		return err
	}
	recs := make([]*kgo.Record, len(entries))
	for i, e := range entries {
		// A nil key would be spread over partitions; an empty one hashes.
		recs[i] = &kgo.Record{Topic: topic, Key: append([]byte{}, e.Key...), Value: []byte(e.Body)}
	}
	if err := q.client.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("publish to %s: %w", topic, err)
	}
	return nil
}

// Trim does nothing: Kafka drops old records by the topics' retention
// (retention.ms, retention.bytes), whether or not a group read them. Set it
// well above the longest a consumer may fall behind; PostgreSQL holds every
// event and delivery, and the scheduler re-enqueues what a topic lost.
func (q *Queue) Trim(context.Context, string) error { return nil }

// Ping asks a broker for the cluster's metadata.
func (q *Queue) Ping(ctx context.Context) error {
	if err := q.client.Ping(ctx); err != nil {
		return fmt.Errorf("kafka ping: %w", err)
	}
	return nil
}
