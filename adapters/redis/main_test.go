package redis

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/dispatch-webhooks/dispatch/adapters/redis/redistest"
)

// TestMain stops the Redis Cluster the cluster tests share, and checks that
// no test leaves a goroutine behind: blocked reads and clients must end
// with their test.
func TestMain(m *testing.M) {
	code := m.Run()
	redistest.StopSharedCluster()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
