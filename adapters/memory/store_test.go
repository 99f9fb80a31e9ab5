package memory_test

import (
	"testing"

	"github.com/dispatch-webhooks/dispatch/adapters/memory"
	"github.com/dispatch-webhooks/dispatch/ports"
	"github.com/dispatch-webhooks/dispatch/ports/storetest"
)

func TestStore(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(*testing.T) ports.Store { return memory.NewStore() })
}
