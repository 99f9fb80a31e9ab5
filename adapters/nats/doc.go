// Package nats holds Dispatch's NATS adapter: the work queue on JetStream
// (Queue, ports.Queue and ports.StreamLag), built on nats.go and its
// jetstream package, and the connection helper (Connect).
//
// Rule of dependency: this package imports ports, nats.go and the standard
// library, never application or another adapter. nats.go types and errors
// (jetstream.Msg, ErrConsumerNotFound, API errors) stop here: callers only
// see ports types and plain errors.
package nats
