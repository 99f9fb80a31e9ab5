package memory_test

import (
	"time"

	"testing"

	"github.com/dispatch-webhooks/dispatch/adapters/memory"
	"github.com/dispatch-webhooks/dispatch/ports"
	"github.com/dispatch-webhooks/dispatch/ports/storetest"
)

func TestStore(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(*testing.T) ports.Store { return memory.NewStore() })
}

func TestRetention(t *testing.T) {
	t.Parallel()
	storetest.RunRetention(t, func(*testing.T, time.Time, time.Duration) storetest.RetentionStore { return memory.NewStore() })
}
