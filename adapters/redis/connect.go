package redis

import (
	"context"
	"errors"
	"fmt"
	"net/url"

	goredis "github.com/redis/go-redis/v9"
)

// DefaultURL is the REDIS_URL used when none is configured.
const DefaultURL = "redis://127.0.0.1:6379/0"

// Connect opens a client for rawURL (redis:// or rediss://, the database
// index in the path is honoured) and pings it, so a wrong address fails at
// start-up with a clear message instead of on the first delivery. The caller
// closes the client.
func Connect(ctx context.Context, rawURL string) (goredis.UniversalClient, error) {
	opts, err := goredis.ParseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("redis: parse REDIS_URL %s: %v", redactURL(rawURL), err)
	}
	client := goredis.NewClient(opts)
	if err := client.Ping(ctx).Err(); err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("redis: ping %s (db %d): %w", redactURL(rawURL), opts.DB, interpretError(err))
	}
	return client, nil
}

// ConnectCluster opens a Redis Cluster client for rawURL, go-redis's
// cluster URL (redis://h1:p1?addr=h2:p2&addr=h3:p3; the other nodes are
// found from these), and pings every master, so a wrong address fails at
// start-up. The caller closes the client.
func ConnectCluster(ctx context.Context, rawURL string) (goredis.UniversalClient, error) {
	opts, err := goredis.ParseClusterURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("redis: parse cluster REDIS_URL %s: %v", redactURL(rawURL), err)
	}
	client := goredis.NewClusterClient(opts)
	err = client.ForEachMaster(ctx, func(ctx context.Context, node *goredis.Client) error {
		return node.Ping(ctx).Err()
	})
	if err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("redis: ping cluster %s: %w", redactURL(rawURL), interpretError(err))
	}
	return client, nil
}

// redactURL hides a password so connection errors can be logged safely.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "<unparsable URL>"
	}
	return u.Redacted()
}

// interpretError maps a go-redis error to one that carries no go-redis type:
// context errors keep their identity (callers test errors.Is(err,
// context.Canceled)), everything else becomes plain text. redis.Nil never
// reaches here: each method decides what "no reply" means for it.
func interpretError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled):
		return context.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		return context.DeadlineExceeded
	default:
		return errors.New(err.Error())
	}
}
