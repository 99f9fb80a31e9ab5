// Package kafkatest gives tests a Kafka to talk to: the brokers named by
// KAFKA_BROKERS, or else one in-process franz-go kfake cluster per test
// binary, listening on loopback, so that other processes the test starts
// can reach it too.
//
// Rule of dependency: test helpers only; imports franz-go and the standard
// library, never application code.
package kafkatest

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
)

var (
	once    sync.Once
	brokers []string
	err     error
)

// Brokers are the seed brokers tests use: KAFKA_BROKERS (comma-separated)
// when set, or those of a kfake cluster started on first use and left to
// end with the test binary.
func Brokers(t testing.TB) []string {
	t.Helper()
	once.Do(func() {
		if env := os.Getenv("KAFKA_BROKERS"); env != "" {
			brokers = strings.Split(env, ",")
			return
		}
		var c *kfake.Cluster
		c, err = kfake.NewCluster(kfake.NumBrokers(1))
		if err == nil {
			brokers = c.ListenAddrs()
		}
	})
	if err != nil {
		t.Fatalf("kafkatest: start a kfake cluster: %v", err)
	}
	return brokers
}

// Prefix is a topic and group prefix of t's own, so tests share a cluster.
func Prefix(t testing.TB) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return "t" + hex.EncodeToString(b)
}
