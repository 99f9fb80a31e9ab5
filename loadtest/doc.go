// Package loadtest is dispatch-load: it measures what Dispatch sustains —
// events accepted durably per second, deliveries received per second, the
// latency from a publish's 202 to the signed webhook reaching an endpoint,
// attempts, losses, duplicates and each process's peak memory — against a
// running deployment or one it starts in process on a fresh database, with
// its own verifying receiver on 127.0.0.1. It drives the API through the
// generated Go client and writes JSON, Markdown and a PNG plot per run, and
// runs the standard workloads of the performance targets (SPEC §6) as a
// bench suite.
//
// Rule of dependency: a tool at the edge, like bootstrap itself: it imports
// bootstrap (to start roles), the generated client, pgx and go-redis (to
// create and drop its database and key prefix), the Standard Webhooks
// library (to verify signatures) and gonum/plot; nothing in Dispatch
// imports it.
package loadtest
