package nats_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind: pull requests,
// acknowledgement waits and connections must end with their test.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
