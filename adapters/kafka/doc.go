// Package kafka is Dispatch's work queue on Apache Kafka, built on franz-go
// (kgo for records and consumer groups, kadm for topics and offsets).
//
// A stream is a topic per deployment, "<prefix>.<stream>", of a fixed number
// of partitions; an entry is a record keyed by the entry's Key, so the
// entries of one key (one subscription's deliveries) stay in one partition,
// in order. A port group is a Kafka consumer group,
// "<prefix>.<stream>.<group>", of which each process (each Queue) is one
// member: the process's consumers share its partitions, and what they hold
// pending is tracked in the process.
//
// A partition's committed offset advances only past entries that were all
// acknowledged: the oldest unacknowledged entry holds it back. When a
// partition moves to another process (a rebalance, or this one stopped or
// died), its entries still unacknowledged here come back to the new owner,
// read again from the committed offset: at least once, never lost. Reclaim
// hands out again this process's own entries left unacknowledged too long.
//
// Trim is a no-op: Kafka removes old records by its retention settings.
// Retries and delays go through PostgreSQL and the scheduler, never through
// the topics, so nothing waits in a topic for longer than its consumers take.
//
// Rule of dependency: this package imports ports, franz-go and the standard
// library, never application or another adapter. franz-go types and errors
// stop here.
package kafka
