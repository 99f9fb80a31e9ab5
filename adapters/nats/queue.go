package nats

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/dispatch-webhooks/dispatch/ports"
)

// Queue defaults.
const (
	// DefaultPrefix names the JetStream stream and starts every subject.
	DefaultPrefix = "dispatch"
	// DefaultPartitions is how many subjects each queue stream is spread
	// over.
	DefaultPartitions = 16
	// DefaultAckWait is how long a read entry may go unacknowledged before
	// JetStream hands it out again: Dispatch's default visibility timeout.
	DefaultAckWait = 30 * time.Second
)

// keyHeader carries an entry's key; an entry without a key has none.
const keyHeader = "Dispatch-Key"

// ackTimeout bounds the wait for the server to confirm acknowledgements
// when ctx has no earlier deadline.
const ackTimeout = 10 * time.Second

// consumerCheck is how often an idle group checks that its consumer still
// exists (see checkConsumer).
const consumerCheck = time.Second

// names are what a prefix, a stream and a group may be: JetStream stream and
// consumer names and subject tokens share them.
var names = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// QueueOptions configures a Queue. The zero value means the defaults.
type QueueOptions struct {
	// Prefix names the deployment's JetStream stream and is the first token
	// of its subjects, so several deployments (or tests) share one server.
	// Letters, digits, '-' and '_' only. "" means DefaultPrefix.
	Prefix string
	// Partitions is how many subjects each queue stream is spread over by
	// entry key: "<prefix>.<stream>.<partition>". 0 means DefaultPartitions.
	Partitions int
	// AckWait is the visibility timeout: how long an entry read and not
	// acknowledged stays with its reader before JetStream hands it to the
	// next Read of its group. 0 means DefaultAckWait.
	AckWait time.Duration
}

// Validate reports the first invalid option.
func (o QueueOptions) Validate() error {
	if o.Prefix != "" && !names.MatchString(o.Prefix) {
		return fmt.Errorf("nats queue: prefix must be letters, digits, '-' and '_' (a JetStream stream name and subject token), got %q", o.Prefix)
	}
	if o.Partitions < 0 {
		return fmt.Errorf("nats queue: partitions must be >= 1 (0 means %d), got %d", DefaultPartitions, o.Partitions)
	}
	if o.AckWait < 0 {
		return fmt.Errorf("nats queue: ack wait must be > 0 (0 means %s), got %s", DefaultAckWait, o.AckWait)
	}
	return nil
}

// Queue is ports.Queue on NATS JetStream. Each queue stream of a
// deployment is a JetStream stream, "<prefix>_<stream>", with limits
// retention, on the subjects "<prefix>.<stream>.<partition>", the partition
// a stable hash of the entry's key; a consumer group is a durable pull
// consumer of that stream, named after the group, filtered on
// "<prefix>.<stream>.*" and delivering from the stream's start. An entry's
// id is its JetStream stream sequence, the same for every group; its key
// travels in a header.
//
// Limits retention keeps the port's contract where interest or work-queue
// retention would not: a group created late still reads from the stream's
// start, and only Trim removes entries, below the lowest ack floor of the
// stream's consumers, so nothing a group has not finished goes. Trim purges
// without a subject filter, and consumers carry one, because NATS server
// 2.9 (2.9.10 tested) drops the pending entries of every consumer on a purge filtered by
// subject, and of unfiltered consumers on any purge (TrimKeepsPending of
// the contract suite catches it). A JetStream stream per queue stream,
// rather than one per deployment, is what makes an unfiltered purge exact:
// on a shared stream it would remove the entries of a queue stream that
// has no group yet.
//
// Redelivery: JetStream hands an entry read and not acknowledged within
// AckWait (the visibility timeout) to the next Read of its group by itself,
// as a redelivery. Reclaim therefore returns nothing: if it returned such
// entries too, the scheduler would append each of them a second time, and
// every redelivery would be doubled. Read hands out new and redelivered
// entries alike; a redelivered delivery entry keeps its fresh mark, which is
// harmless because its creator's reservation, as long as AckWait, has ended
// by then, so its holder claims the delivery. Ack acknowledges entries this
// Queue read (it keeps their acknowledgement subjects): an id it never read,
// or one of another process, is ignored, and the entry comes back after
// AckWait. Entries that reach a Read after its ctx ended are handed back
// at once (Nak); those that reach it after it stopped listening come back
// after AckWait. An entry deleted from the stream while pending is skipped
// by redelivery, as the port asks of trimmed entries. An entry that cannot
// be read as one (no JetStream metadata) is terminated (Term), so it never
// comes back to block its group.
//
// Safe for concurrent use.
type Queue struct {
	nc         *nats.Conn
	js         jetstream.JetStream
	prefix     string
	partitions int
	ackWait    time.Duration

	mu        sync.Mutex
	streams   map[string]bool               // queue streams known to exist
	consumers map[string]jetstream.Consumer // by JetStream stream and group
	checked   map[string]time.Time          // last checkConsumer, by the same

	// held remembers the acknowledgement subject of every entry this Queue
	// read and has not acknowledged, by consumer name and sequence.
	heldMu    sync.Mutex
	held      map[heldKey]heldEntry
	lastSweep time.Time
}

type heldKey struct {
	consumer string
	seq      uint64
}

type heldEntry struct {
	reply string
	at    time.Time
}

var (
	_ ports.Queue     = (*Queue)(nil)
	_ ports.StreamLag = (*Queue)(nil)
)

// NewQueue returns a Queue on nc. The caller owns nc and closes it.
func NewQueue(nc *nats.Conn, opts QueueOptions) (*Queue, error) {
	if nc == nil {
		return nil, errors.New("nats queue: connection is nil")
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	if opts.Partitions == 0 {
		opts.Partitions = DefaultPartitions
	}
	if opts.AckWait == 0 {
		opts.AckWait = DefaultAckWait
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(16384))
	if err != nil {
		return nil, fmt.Errorf("nats queue: %w", err)
	}
	return &Queue{
		nc:         nc,
		js:         js,
		prefix:     opts.Prefix,
		partitions: opts.Partitions,
		ackWait:    opts.AckWait,
		streams:    make(map[string]bool),
		consumers:  make(map[string]jetstream.Consumer),
		checked:    make(map[string]time.Time),
		held:       make(map[heldKey]heldEntry),
	}, nil
}

// StreamName is the JetStream stream of queue stream stream.
func (q *Queue) StreamName(stream string) string { return q.prefix + "_" + stream }

// Prefix is the queue's prefix.
func (q *Queue) Prefix() string { return q.prefix }

// filter is the subject filter of every partition of stream.
func (q *Queue) filter(stream string) string { return q.prefix + "." + stream + ".*" }

// subject is the subject of key's partition of stream: FNV-1a of the key,
// stable across processes and releases.
func (q *Queue) subject(stream, key string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return q.prefix + "." + stream + "." + strconv.FormatUint(uint64(h.Sum32()%uint32(q.partitions)), 10)
}

// checkNames vets a queue stream and a group name. Stream names carry no
// '_', so that "<prefix>_<stream>" names one pair only.
func checkNames(stream, group string) error {
	if !names.MatchString(stream) || strings.Contains(stream, "_") {
		return fmt.Errorf("nats queue: stream name must be letters, digits and '-', got %q", stream)
	}
	if group != "" && !names.MatchString(group) {
		return fmt.Errorf("nats queue: group name must be letters, digits, '-' and '_', got %q", group)
	}
	return nil
}

// ensureStream creates the JetStream stream of stream on first use.
func (q *Queue) ensureStream(ctx context.Context, stream string) error {
	q.mu.Lock()
	known := q.streams[stream]
	q.mu.Unlock()
	if known {
		return nil
	}
	name := q.StreamName(stream)
	_, err := q.js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		_, err = q.js.CreateStream(ctx, jetstream.StreamConfig{
			Name:      name,
			Subjects:  []string{q.prefix + "." + stream + ".>"},
			Retention: jetstream.LimitsPolicy,
			Storage:   jetstream.FileStorage,
			Discard:   jetstream.DiscardOld,
		})
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			err = nil // created meanwhile
		}
	}
	if err != nil {
		return fmt.Errorf("nats queue: stream %s: %w", name, err)
	}
	q.mu.Lock()
	q.streams[stream] = true
	q.mu.Unlock()
	return nil
}

// consumer returns the durable consumer of group on stream, creating it
// (and the stream) if needed.
func (q *Queue) consumer(ctx context.Context, stream, group string) (jetstream.Consumer, error) {
	name := q.StreamName(stream)
	q.mu.Lock()
	c := q.consumers[name+"\x00"+group]
	q.mu.Unlock()
	if c != nil {
		return c, nil
	}
	if err := q.ensureStream(ctx, stream); err != nil {
		return nil, err
	}
	c, err := q.js.CreateOrUpdateConsumer(ctx, name, jetstream.ConsumerConfig{
		Durable:       group,
		FilterSubject: q.filter(stream),
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       q.ackWait,
		MaxDeliver:    -1,
		MaxAckPending: -1,
	})
	if err != nil {
		return nil, fmt.Errorf("nats queue: consumer %s of %s: %w", group, name, err)
	}
	q.mu.Lock()
	q.consumers[name+"\x00"+group] = c
	q.mu.Unlock()
	return c, nil
}

// forget drops what Queue remembers of stream and of the consumer of
// group on it, after the server said one of them is gone.
func (q *Queue) forget(stream, group string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.streams, stream)
	delete(q.consumers, q.StreamName(stream)+"\x00"+group)
}

func isNotFound(err error) bool {
	return errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrConsumerNotFound)
}

// Publish appends entries with asynchronous JetStream publishes, in order
// on one connection, and waits for every acknowledgement: one round trip
// for the call, whatever its size.
func (q *Queue) Publish(ctx context.Context, stream string, entries ...ports.Entry) error {
	if len(entries) == 0 {
		return nil
	}
	if err := checkNames(stream, ""); err != nil {
		return err
	}
	if err := q.ensureStream(ctx, stream); err != nil {
		return err
	}
	err := q.publish(ctx, stream, entries)
	if errors.Is(err, jetstream.ErrNoStreamResponse) {
		// The stream was deleted since it was ensured: create it again.
		q.forget(stream, "")
		if err := q.ensureStream(ctx, stream); err != nil {
			return err
		}
		err = q.publish(ctx, stream, entries)
	}
	if err != nil {
		return fmt.Errorf("nats queue: publish %d entries to %s: %w", len(entries), q.StreamName(stream), err)
	}
	return nil
}

func (q *Queue) publish(ctx context.Context, stream string, entries []ports.Entry) error {
	acks := make([]jetstream.PubAckFuture, 0, len(entries))
	for _, e := range entries {
		msg := nats.NewMsg(q.subject(stream, e.Key))
		msg.Data = []byte(e.Body)
		if e.Key != "" {
			msg.Header.Set(keyHeader, e.Key)
		}
		f, err := q.js.PublishMsgAsync(msg)
		if err != nil {
			return err
		}
		acks = append(acks, f)
	}
	for _, f := range acks {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// Read fetches up to count entries from the group's consumer, waiting up
// to block for the first (a pull request that expires). Entries it
// received after ctx ended are handed back (Nak) for the next Read.
func (q *Queue) Read(ctx context.Context, stream, group, consumer string, count int, block time.Duration) ([]ports.Message, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := checkNames(stream, group); err != nil {
		return nil, err
	}
	count = max(count, 1)
	msgs, err := q.read(ctx, stream, group, count, block)
	if isNotFound(err) {
		// Deleted under us: create both again, reading from the start.
		q.forget(stream, group)
		msgs, err = q.read(ctx, stream, group, count, block)
	}
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, ctxErr
		}
		return nil, fmt.Errorf("nats queue: read %s as %s/%s: %w", q.StreamName(stream), group, consumer, err)
	}
	return msgs, nil
}

// read takes what the group's consumer has at once; when that is nothing
// and block allows, it waits for one entry with a pull request that
// expires at the block's end, then takes what else came meanwhile. A pull
// request for count entries would wait for all of them.
func (q *Queue) read(ctx context.Context, stream, group string, count int, block time.Duration) ([]ports.Message, error) {
	c, err := q.consumer(ctx, stream, group)
	if err != nil {
		return nil, err
	}
	name := q.StreamName(stream) + "\x00" + group
	msgs, err := q.fetch(ctx, c, name, count, 0)
	if err != nil || len(msgs) > 0 {
		return msgs, err
	}
	if block <= 0 {
		return msgs, q.checkConsumer(ctx, c, name)
	}
	deadline := time.Now().Add(block)
	for len(msgs) == 0 {
		wait := time.Until(deadline)
		if wait < time.Millisecond {
			return msgs, q.checkConsumer(ctx, c, name)
		}
		// The server ends a pull request a little before its context
		// does: loop until the block is over.
		if msgs, err = q.fetch(ctx, c, name, 1, wait); err != nil {
			return nil, err
		}
	}
	if count > 1 {
		more, err := q.fetch(ctx, c, name, count-1, 0)
		if err == nil {
			msgs = append(msgs, more...)
		}
	}
	return msgs, nil
}

// checkConsumer asks, at most once per consumerCheck, whether the consumer
// behind an empty read still exists: a pull request to a deleted one gets
// no answer at all, so without asking, a deleted stream would go unnoticed
// and its group would read nothing forever. A gone consumer is reported as
// not found, for Read to create it again.
func (q *Queue) checkConsumer(ctx context.Context, c jetstream.Consumer, name string) error {
	now := time.Now()
	q.mu.Lock()
	due := now.Sub(q.checked[name]) >= consumerCheck
	if due {
		q.checked[name] = now
	}
	q.mu.Unlock()
	if !due {
		return nil
	}
	if _, err := c.Info(ctx); isNotFound(err) {
		return err
	}
	return nil // any other failure shows on the next read
}

// fetch sends one pull request for up to count entries, waiting up to wait
// (0: not at all). Entries that arrive after ctx ended are handed back
// (Nak) for the next Read, without waiting out AckWait.
func (q *Queue) fetch(ctx context.Context, c jetstream.Consumer, name string, count int, wait time.Duration) ([]ports.Message, error) {
	var batch jetstream.MessageBatch
	var err error
	if wait <= 0 {
		batch, err = c.FetchNoWait(count)
	} else {
		fetchCtx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		batch, err = c.Fetch(count, jetstream.FetchContext(fetchCtx))
	}
	if err != nil {
		return nil, err
	}
	msgs := []ports.Message{}
	for m := range batch.Messages() {
		if ctx.Err() != nil {
			_ = m.Nak()
			continue
		}
		if msg, ok := q.toMessage(name, m); ok {
			msgs = append(msgs, msg)
		}
	}
	if len(msgs) > 0 {
		// Even if ctx ended meanwhile: they are pending for this group
		// now, and handing them over beats leaving them to wait out
		// AckWait.
		return msgs, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := batch.Error(); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return nil, err
	}
	return msgs, nil
}

// toMessage converts m, remembering its acknowledgement subject. An entry
// without JetStream metadata is terminated: it could never be acknowledged.
func (q *Queue) toMessage(consumer string, m jetstream.Msg) (ports.Message, bool) {
	meta, err := m.Metadata()
	if err != nil {
		_ = m.Term()
		return ports.Message{}, false
	}
	seq := meta.Sequence.Stream
	q.hold(heldKey{consumer: consumer, seq: seq}, m.Reply())
	return ports.Message{
		ID:   strconv.FormatUint(seq, 10),
		Key:  m.Headers().Get(keyHeader),
		Body: string(m.Data()),
	}, true
}

// hold remembers reply for key. Entries held longer than twice AckWait
// were redelivered elsewhere long ago (or their holder gave up): they are
// forgotten, at most once per AckWait, so the map does not grow without
// bound. Acknowledging one of them later is ignored; its group got it back.
func (q *Queue) hold(key heldKey, reply string) {
	now := time.Now()
	q.heldMu.Lock()
	defer q.heldMu.Unlock()
	q.held[key] = heldEntry{reply: reply, at: now}
	if now.Sub(q.lastSweep) < q.ackWait {
		return
	}
	q.lastSweep = now
	for k, e := range q.held {
		if now.Sub(e.at) > 2*q.ackWait {
			delete(q.held, k)
		}
	}
}

// ackAck is JetStream's acknowledgement.
var ackAck = []byte("+ACK")

// Ack acknowledges the entries this Queue read, and waits until the server
// confirmed each (a double acknowledgement, all in one round trip), so a
// Lag or Trim after it counts them as done. Ids it did not read are
// ignored.
func (q *Queue) Ack(ctx context.Context, stream, group string, ids ...string) error {
	if len(ids) == 0 {
		return nil
	}
	name := q.StreamName(stream) + "\x00" + group
	replies := make([]string, 0, len(ids))
	keys := make([]heldKey, 0, len(ids))
	q.heldMu.Lock()
	for _, id := range ids {
		seq, err := strconv.ParseUint(id, 10, 64)
		if err != nil {
			continue // not an id of this queue
		}
		k := heldKey{consumer: name, seq: seq}
		if e, ok := q.held[k]; ok {
			replies = append(replies, e.reply)
			keys = append(keys, k)
		}
	}
	q.heldMu.Unlock()
	if len(replies) == 0 {
		return nil
	}

	inbox := q.nc.NewInbox()
	confirmed := make(chan *nats.Msg, len(replies))
	sub, err := q.nc.ChanSubscribe(inbox, confirmed)
	if err != nil {
		return fmt.Errorf("nats queue: ack %d entries of %s for %s: %w", len(replies), q.StreamName(stream), group, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	for _, reply := range replies {
		if err := q.nc.PublishMsg(&nats.Msg{Subject: reply, Reply: inbox, Data: ackAck}); err != nil {
			return fmt.Errorf("nats queue: ack %d entries of %s for %s: %w", len(replies), q.StreamName(stream), group, err)
		}
	}
	timeout := time.NewTimer(ackTimeout)
	defer timeout.Stop()
	for range replies {
		select {
		case <-confirmed:
		case <-ctx.Done():
			return fmt.Errorf("nats queue: ack %d entries of %s for %s: %w", len(replies), q.StreamName(stream), group, ctx.Err())
		case <-timeout.C:
			return fmt.Errorf("nats queue: ack %d entries of %s for %s: no confirmation within %s", len(replies), q.StreamName(stream), group, ackTimeout)
		}
	}
	q.heldMu.Lock()
	for _, k := range keys {
		delete(q.held, k)
	}
	q.heldMu.Unlock()
	return nil
}

// Reclaim returns nothing: JetStream hands entries idle past AckWait to
// the next Read of their group by itself (see Queue), and returning them
// here as well would have the scheduler append each a second time.
func (q *Queue) Reclaim(ctx context.Context, stream, group, consumer string, minIdle time.Duration, count int) ([]ports.Message, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return []ports.Message{}, nil
}

// Trim purges the entries of stream below the lowest ack floor of its
// consumers: every entry at or below a consumer's ack floor is acknowledged
// by it, and entries it has not read yet or holds pending are above it. A
// consumer that has read nothing has its floor before the stream's first
// entry, and keeps everything. The floors are read before the purge, not
// atomically with it; that is safe because a floor only moves forward, and
// a consumer created meanwhile starts at the purged stream's start.
func (q *Queue) Trim(ctx context.Context, stream string) error {
	if err := checkNames(stream, ""); err != nil {
		return err
	}
	name := q.StreamName(stream)
	s, err := q.js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("nats queue: trim %s: %w", name, err)
	}
	var floor uint64
	found := false
	list := s.ListConsumers(ctx)
	for info := range list.Info() {
		if !found || info.AckFloor.Stream < floor {
			floor = info.AckFloor.Stream
		}
		found = true
	}
	if err := list.Err(); err != nil {
		return fmt.Errorf("nats queue: trim %s: list consumers: %w", name, err)
	}
	if !found || floor < s.CachedInfo().State.FirstSeq {
		return nil // no group said what it is done with, or nothing is done
	}
	if err := s.Purge(ctx, jetstream.WithPurgeSequence(floor+1)); err != nil {
		return fmt.Errorf("nats queue: trim %s below %d: %w", name, floor+1, err)
	}
	return nil
}

// DeleteStreams deletes the JetStream streams of every queue stream of the
// prefix, entries and consumer groups with them: for tests, and to retire
// a deployment.
func (q *Queue) DeleteStreams(ctx context.Context) error {
	list := q.js.StreamNames(ctx, jetstream.WithStreamListSubject(q.prefix+".>"))
	var errs []error
	for name := range list.Name() {
		if err := q.js.DeleteStream(ctx, name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			errs = append(errs, err)
		}
	}
	if err := list.Err(); err != nil {
		errs = append(errs, err)
	}
	q.mu.Lock()
	clear(q.streams)
	clear(q.consumers)
	q.mu.Unlock()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("nats queue: delete streams of %s: %w", q.prefix, err)
	}
	return nil
}

// Ping reports whether the server answers with JetStream enabled.
func (q *Queue) Ping(ctx context.Context) error {
	if _, err := q.js.AccountInfo(ctx); err != nil {
		return fmt.Errorf("nats queue: ping: %w", err)
	}
	return nil
}

// DeleteDeployment connects to url and deletes the JetStream streams of the
// queue prefix (Queue.DeleteStreams): to retire a deployment, or what a
// test or a load run made.
func DeleteDeployment(ctx context.Context, url, prefix string) error {
	nc, err := Connect(ctx, url)
	if err != nil {
		return err
	}
	defer nc.Close()
	q, err := NewQueue(nc, QueueOptions{Prefix: prefix})
	if err != nil {
		return err
	}
	return q.DeleteStreams(ctx)
}
