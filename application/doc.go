// Package application holds Dispatch's use cases, one per file: ingest,
// fan-out, deliver, schedule, subscriptions and the read side of events.
// A consumer loop drives the stream-fed use cases.
//
// Rule of dependency: application imports domain, ports and the standard
// library only. Use cases do not log; errors are returned, and bootstrap
// wraps use cases with logging and metrics.
package application
