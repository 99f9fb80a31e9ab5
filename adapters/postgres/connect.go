package postgres

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Connect opens a connection pool to dsn and checks that the database
// answers. Pool settings given in the DSN (pool_max_conns,
// pool_max_conn_lifetime, …) win; otherwise the pool holds
// DefaultMaxConns connections. A pgx pool reuses prepared statements per
// connection, so sqlc's queries cost one round trip each after warm-up.
func Connect(ctx context.Context, dsn string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// pgconn masks the password in the connection string it quotes.
		return nil, fmt.Errorf("parse database URL: %w", err)
	}
	if !strings.Contains(dsn, "pool_max_conns") {
		cfg.MaxConns = DefaultMaxConns()
	}
	if !strings.Contains(dsn, "pool_max_conn_idle_time") {
		cfg.MaxConnIdleTime = 5 * time.Minute
	}
	if _, ok := cfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		// Shows up in pg_stat_activity, so operators see who holds a lock.
		cfg.ConnConfig.RuntimeParams["application_name"] = "dispatch"
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", redact(cfg), err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to %s: %w", redact(cfg), err)
	}
	return pool, nil
}

// DefaultMaxConns is the pool size when the DSN does not set one: enough
// connections for the batched writers and the workers' claims to overlap
// their round trips, and few enough that PostgreSQL on the same small box
// is not swamped with backends.
func DefaultMaxConns() int32 {
	return int32(max(8, 4*runtime.GOMAXPROCS(0)))
}

// redact names the server and database of cfg without the password.
func redact(cfg *pgxpool.Config) string {
	c := cfg.ConnConfig
	return fmt.Sprintf("postgres://%s@%s:%d/%s", c.User, c.Host, c.Port, c.Database)
}
