// Package memory holds in-process adapters of Dispatch's ports, for tests
// and `dispatch dev`: nothing is durable, everything is lost when the
// process exits. Each adapter passes the same contract suite as its
// production counterpart (ports/storetest, ports/queuetest,
// ports/protectiontest), so code tested
// against it behaves the same on PostgreSQL and Redis.
//
// Rule of dependency: imports domain, ports and the standard library only.
package memory
