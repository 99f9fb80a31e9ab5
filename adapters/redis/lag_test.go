package redis_test

import (
	"testing"

	"github.com/dispatch-webhooks/dispatch/adapters/redis"
	"github.com/dispatch-webhooks/dispatch/adapters/redis/redistest"
	"github.com/dispatch-webhooks/dispatch/ports/queuetest"
)

func TestQueueLagOnRedis(t *testing.T) {
	t.Parallel()
	queuetest.RunLag(t, func(t *testing.T) queuetest.LagQueue {
		opts := redis.DefaultQueueOptions()
		opts.Prefix = redistest.Prefix(t)
		q, err := redis.NewQueue(redistest.Client(t), opts)
		if err != nil {
			t.Fatal(err)
		}
		return q
	})
}
