package ports

import (
	"context"
	"time"
)

// Stream names. A stream carries ids; the state they refer to lives in the
// store.
const (
	// EventStream carries ids of events waiting for fan-out.
	EventStream = "events"
	// DeliveryStream carries ids of deliveries waiting for an attempt.
	DeliveryStream = "deliveries"
)

// Entry is one entry to publish.
type Entry struct {
	// Key places the entry in one of its stream's partitions: entries of
	// one key go to one partition, and a queue spreads keys over its
	// partitions. The delivery stream is keyed by subscription id, the
	// event stream by event id.
	Key string
	// Body is the entry's content: an event or delivery id (see
	// application's entries).
	Body string
}

// Message is one entry read from a stream.
type Message struct {
	// ID identifies the entry for Ack; it is assigned by the queue.
	ID string
	// Key and Body are what was published.
	Key, Body string
}

// Queue is a set of append-only streams read through consumer groups, with
// at-least-once semantics: an entry read by a consumer stays pending for
// that group until acknowledged, and can be reclaimed by another consumer
// once it has been idle long enough. All methods are safe for concurrent use.
type Queue interface {
	// Publish appends entries to stream, those of one key in order, and
	// returns once the queue has accepted all of them. On error some may
	// have been appended.
	Publish(ctx context.Context, stream string, entries ...Entry) error
	// Read returns up to count entries of stream never delivered to group
	// (and, on a queue that redelivers by itself, entries idle past its
	// visibility timeout: see Reclaim), creating the group (reading from
	// the stream's start) if needed. It
	// waits up to block for at least one entry (block <= 0 does not wait,
	// unlike Redis's BLOCK 0) and returns an empty slice if none came; it
	// returns early with ctx's error when ctx ends.
	Read(ctx context.Context, stream, group, consumer string, count int, block time.Duration) ([]Message, error)
	// Ack acknowledges entries of stream for group; acknowledging an unknown
	// or already acknowledged id is not an error.
	Ack(ctx context.Context, stream, group string, ids ...string) error
	// Reclaim transfers to consumer up to count entries of stream pending
	// for group that have been idle for at least minIdle (their consumer
	// died or hung), and returns them. A reclaimed entry stays pending until
	// acknowledged. An entry whose data was trimmed away is acknowledged and
	// not returned. A queue whose broker itself hands such entries to the
	// next Read of their group (NATS JetStream, after its AckWait) returns
	// none, so the scheduler, which appends again what Reclaim returns, does
	// not double them (queuetest.Features.RedeliverAfter).
	Reclaim(ctx context.Context, stream, group, consumer string, minIdle time.Duration, count int) ([]Message, error)
	// Trim removes the oldest entries of stream, up to the first one that
	// some consumer group has not yet received and acknowledged, so a stream
	// does not grow without bound. Entries some group has not yet read, or
	// holds pending, are kept, and so is every entry after them: one entry
	// left pending holds trimming back until it is acknowledged. A stream
	// without groups is left alone; a missing stream is not an error.
	// Trimming may be approximate (keep more than it could), never the
	// other way.
	Trim(ctx context.Context, stream string) error
	// Ping reports whether the queue is reachable (readiness).
	Ping(ctx context.Context) error
}
