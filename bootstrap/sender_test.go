package bootstrap_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/dispatch-webhooks/dispatch/bootstrap"
)

// The sender may open a connection for every delivery a worker may have in
// flight, all of which can be to one endpoint.
func TestSenderAllowsAConnectionPerDeliveryInFlight(t *testing.T) {
	for _, concurrency := range []int{1, bootstrap.DefaultConcurrency, 5000} {
		cfg := bootstrap.DefaultConfig()
		cfg.WorkerConcurrency = concurrency
		assert.Equal(t, concurrency, bootstrap.SenderOptions(cfg).MaxConnsPerHost)
	}
}
