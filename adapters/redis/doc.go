// Package redis holds Dispatch's Redis adapters, built on go-redis v9: the
// work queue on Redis Streams (Queue), the endpoint protections shared by
// every worker (Protection: breaker, rate limit and concurrency cap in one
// Lua script to admit a request and one to finish it), and the connection
// helpers (Connect, ConnectCluster).
//
// Rule of dependency: this package imports ports, domain, go-redis,
// internal/batch (technology-neutral batching, used by Publish and by Protection's pipelines) and
// the standard library, never application or another adapter. go-redis types and errors (redis.Nil, NOGROUP replies) stop here:
// they are interpreted once, at the seam, and callers only see ports types
// and plain errors.
//
// Every key carries a hash tag: "<prefix>{<name>:events:<n>}" for
// partition n of a stream, "<prefix>{sub:<id>}:…" for a subscription's
// protections. Each transaction, script and multi-key command stays on one
// Redis Cluster slot, so Dispatch runs unchanged on a multi-shard Cluster,
// with the partitions spread over its shards.
package redis
