// Package domain holds Dispatch's rules: events, subscriptions, deliveries,
// retry policies, response classification, the circuit-breaker state machine,
// Standard Webhooks signing, event-type matching and ordering keys.
//
// Rule of dependency: domain imports only the Go standard library and does no
// I/O. Time and randomness are always passed in, so every rule is
// deterministic under test.
package domain
