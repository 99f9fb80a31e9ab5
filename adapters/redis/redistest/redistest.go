// Package redistest gives tests a Redis to talk to: the real server named by
// REDIS_URL with a key prefix per test, or a fresh in-process miniredis for
// fast tests that need to move time.
//
// Rule of dependency: test helpers only; imports go-redis, miniredis and the
// standard library, never application code.
package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	goredis "github.com/redis/go-redis/v9"
)

// DefaultURL is used when REDIS_URL is not set.
const DefaultURL = "redis://127.0.0.1:6379/0"

// StartCommand starts a throwaway Redis the way CI does: no persistence.
const StartCommand = `redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log`

// URL is the Redis the tests use: REDIS_URL, or DefaultURL.
func URL() string {
	if u := os.Getenv("REDIS_URL"); u != "" {
		return u
	}
	return DefaultURL
}

// Client connects to URL() and closes the client when the test ends. An
// unreachable Redis fails the test with the URL and how to start one,
// rather than skipping: a skipped adapter test is a test that never runs.
func Client(t testing.TB) goredis.UniversalClient {
	t.Helper()
	return NamedClient(t, "")
}

// NamedClient is Client whose connections take name (CLIENT SETNAME), so a
// test can find them in CLIENT LIST; "" leaves them unnamed.
func NamedClient(t testing.TB, name string) goredis.UniversalClient {
	t.Helper()
	url := URL()
	opts, err := goredis.ParseURL(url)
	if err != nil {
		t.Fatalf("redistest: REDIS_URL %q is not a Redis URL: %v", url, err)
	}
	opts.ClientName = name
	client := goredis.NewClient(opts)
	t.Cleanup(func() { _ = client.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := client.Ping(ctx).Err(); err != nil {
		t.Fatalf("redistest: Redis at %s is unreachable (%v); set REDIS_URL or start one with:\n  %s", url, err, StartCommand)
	}
	return client
}

// Prefix returns a key prefix no other test uses, "test:<random>:", and
// deletes every key under it when the test ends, so tests can share one
// Redis, run in parallel and leave nothing behind.
func Prefix(t testing.TB) string {
	t.Helper()
	client := Client(t) // its Close runs after the cleanup below (LIFO)
	var b [8]byte
	_, _ = rand.Read(b[:])
	prefix := "test:" + hex.EncodeToString(b[:]) + ":"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := DeleteKeys(ctx, client, prefix); err != nil {
			t.Errorf("redistest: delete keys under %q: %v", prefix, err)
		}
	})
	return prefix
}

// DeleteKeys unlinks every key that starts with prefix, found with SCAN so a
// large database is not blocked the way KEYS would block it.
func DeleteKeys(ctx context.Context, client goredis.UniversalClient, prefix string) error {
	iter := client.Scan(ctx, 0, escapeGlob(prefix)+"*", 500).Iterator()
	var batch []string
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) == 500 {
			if err := client.Unlink(ctx, batch...).Err(); err != nil {
				return err
			}
			batch = batch[:0]
		}
	}
	if err := iter.Err(); err != nil {
		return err
	}
	if len(batch) > 0 {
		return client.Unlink(ctx, batch...).Err()
	}
	return nil
}

// escapeGlob quotes the characters SCAN MATCH treats as patterns.
func escapeGlob(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Mini starts a miniredis for this test only, and a client for it; both stop
// when the test ends. miniredis's SetTime moves the clock stream idle times
// are measured against, so XAUTOCLAIM can be tested without waiting.
func Mini(t testing.TB) (*miniredis.Miniredis, goredis.UniversalClient) {
	t.Helper()
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		t.Fatalf("redistest: start miniredis: %v", err)
	}
	t.Cleanup(mr.Close)
	client := goredis.NewClient(&goredis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	return mr, client
}
