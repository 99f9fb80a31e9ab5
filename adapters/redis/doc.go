// Package redis holds Dispatch's Redis adapters, built on go-redis v9: the
// work queue on Redis Streams (Queue), the endpoint protections shared by
// every worker (Breakers, RateLimiter on go-redis/redis_rate, a Lua
// Semaphore, and FallbackSemaphore for when Redis is unreachable; and
// Protection, the three at once in one Lua script per delivery), and the
// connection helper (Connect).
//
// Rule of dependency: this package imports ports, domain, go-redis,
// redis_rate, internal/batch (technology-neutral batching, used by Publish and by Protection's pipelines) and
// the standard library, never application or another adapter. go-redis types and errors (redis.Nil, NOGROUP replies) stop here:
// they are interpreted once, at the seam, and callers only see ports types
// and plain errors.
//
// Every key carries a hash tag: "<prefix>{events}" for a stream,
// "<prefix>{sub:<id>}:…" for a subscription's protections. Each multi-key
// operation stays on one Redis Cluster slot, so Dispatch runs unchanged on
// Cluster.
package redis
