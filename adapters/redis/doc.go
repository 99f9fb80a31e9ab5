// Package redis holds Dispatch's Redis adapters, built on go-redis v9: the
// work queue on Redis Streams (Queue) and the connection helper (Connect).
//
// Rule of dependency: this package imports ports, domain, go-redis and the
// standard library, never application or another adapter. go-redis types
// and errors (redis.Nil, NOGROUP replies) stop here: they are interpreted
// once, at the seam, and callers only see ports types and plain errors.
//
// Every key is "<prefix>{<name>}": the hash tag keeps each stream (and any
// key derived from it) on one Redis Cluster slot, so Dispatch runs unchanged
// on Cluster.
package redis
