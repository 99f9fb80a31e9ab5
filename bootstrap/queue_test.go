package bootstrap_test

import (
	"cmp"
	"context"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-webhooks/dispatch/adapters/kafka/kafkatest"
	"github.com/dispatch-webhooks/dispatch/adapters/nats"
	"github.com/dispatch-webhooks/dispatch/adapters/redis/redistest"
	"github.com/dispatch-webhooks/dispatch/bootstrap"
)

// testQueue points cfg at the queue that $DISPATCH_QUEUE names (Redis when
// unset), under a prefix of t's own, so that the end-to-end tests run
// unchanged on every adapter: `DISPATCH_QUEUE=nats go test ./bootstrap/`.
func testQueue(t *testing.T, cfg *bootstrap.Config) {
	t.Helper()
	cfg.Queue = cmp.Or(os.Getenv("DISPATCH_QUEUE"), bootstrap.DefaultQueue)
	cfg.QueuePrefix = queuePrefix(t)
	if cfg.Queue == bootstrap.QueueKafka {
		// $KAFKA_BROKERS, or else an in-process cluster on loopback, one
		// per test binary, which dispatch subprocesses reach through
		// queueEnv.
		cfg.KafkaBrokers = kafkatest.Brokers(t)
	}
	if cfg.Queue == bootstrap.QueueNATS {
		cfg.NATSURL = cmp.Or(os.Getenv("NATS_URL"), cfg.NATSURL)
		// The prefix is the same on every run: start from no stream, and
		// leave none behind.
		deleteNATSStreams(t, *cfg)
		t.Cleanup(func() { deleteNATSStreams(t, *cfg) })
	}
}

// deleteNATSStreams deletes the JetStream streams of cfg's queue prefix.
func deleteNATSStreams(t *testing.T, cfg bootstrap.Config) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := nats.DeleteDeployment(ctx, cfg.NATSURL, cfg.QueuePrefix); err != nil {
		t.Fatalf("NATS at %s: %v", cfg.NATSURL, err)
	}
}

// testRedis points cfg at the tests' Redis under a key prefix of t's
// own: the shared 3-master Redis Cluster when $DISPATCH_REDIS_CLUSTER is
// true, so that the end-to-end tests run unchanged on it too, else the
// one of $REDIS_URL.
func testRedis(t *testing.T, cfg *bootstrap.Config) {
	t.Helper()
	if on, _ := strconv.ParseBool(os.Getenv("DISPATCH_REDIS_CLUSTER")); on {
		rc := redistest.SharedCluster(t)
		cfg.RedisURL, cfg.RedisCluster = rc.URL(), true
		cfg.RedisKeyPrefix = redistest.ClusterPrefix(t)
		return
	}
	cfg.RedisURL = redistest.URL()
	cfg.RedisKeyPrefix = redistest.Prefix(t)
}

// queuePrefix is a queue prefix of t's own: its name, in the characters
// every broker accepts in a name.
func queuePrefix(t *testing.T) string {
	name := strings.ToLower(notNameChars.ReplaceAllString(t.Name(), "_"))
	return "t_" + name[max(len(name)-60, 0):]
}

var notNameChars = regexp.MustCompile(`[^A-Za-z0-9_]+`)

// queueEnv is the environment of a dispatch process on cfg's queue.
func queueEnv(cfg bootstrap.Config) []string {
	return []string{
		"DISPATCH_QUEUE=" + cfg.Queue,
		"DISPATCH_QUEUE_PREFIX=" + cfg.QueuePrefix,
		"DISPATCH_QUEUE_PARTITIONS=" + strconv.Itoa(cfg.QueuePartitions),
		"NATS_URL=" + cfg.NATSURL,
		"KAFKA_BROKERS=" + strings.Join(cfg.KafkaBrokers, ","),
	}
}
