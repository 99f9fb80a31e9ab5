// Package ports declares what the application needs from the outside world:
// stores, the work queue, the webhook sender and the clock. Each interface is
// small and its contract is written on every method; every adapter of a port
// runs the port's contract test suite (storetest, queuetest).
//
// Rule of dependency: ports imports only domain and the standard library.
package ports
