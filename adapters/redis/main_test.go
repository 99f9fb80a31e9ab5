package redis

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind: blocked reads and
// clients must end with their test.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
