package memory_test

import (
	"testing"

	"github.com/dispatch-webhooks/dispatch/adapters/memory"
	"github.com/dispatch-webhooks/dispatch/ports/queuetest"
	"github.com/dispatch-webhooks/dispatch/ports/storetest"
)

func TestQueueLagInMemory(t *testing.T) {
	t.Parallel()
	queuetest.RunLag(t, func(*testing.T) queuetest.LagQueue { return memory.NewQueue(memory.QueueOptions{}) })
}

func TestBacklogInMemory(t *testing.T) {
	t.Parallel()
	storetest.RunBacklog(t, func(*testing.T) storetest.BacklogStore { return memory.NewStore() })
}
