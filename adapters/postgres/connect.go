package postgres

import (
	"context"
	"fmt"
	"maps"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Connect opens a connection pool to dsn and checks that the database
// answers. Pool settings given in the DSN (pool_max_conns,
// pool_max_conn_lifetime, …) win; otherwise the pool holds
// DefaultMaxConns connections. Every session has a statement_timeout
// (DefaultStatementTimeout). A pgx pool reuses prepared statements per
// connection, so sqlc's queries cost one round trip each after warm-up.
func Connect(ctx context.Context, dsn string, opts ...ConnectOption) (*pgxpool.Pool, error) {
	var o connectOptions
	for _, opt := range opts {
		opt(&o)
	}
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
	if _, ok := cfg.ConnConfig.RuntimeParams["statement_timeout"]; !ok {
		// A backstop under every caller's own deadline: no statement holds
		// a connection, and the locks it took, for longer.
		cfg.ConnConfig.RuntimeParams["statement_timeout"] = strconv.FormatInt(DefaultStatementTimeout.Milliseconds(), 10)
	}
	if _, ok := cfg.ConnConfig.RuntimeParams["synchronous_commit"]; !ok && o.asyncCommits {
		cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	}
	if o.batches {
		if !strings.Contains(dsn, "pool_max_conns") {
			cfg.MaxConns = batchMaxConns
		}
		maps.Copy(cfg.ConnConfig.RuntimeParams, batchSessions)
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

// DefaultStatementTimeout is every session's statement_timeout, unless the
// DSN sets one (?statement_timeout=60s): as long as an API request's
// default deadline. Migrations run without one (Migrate).
const DefaultStatementTimeout = 30 * time.Second

// ConnectOption tunes Connect.
type ConnectOption func(*connectOptions)

type connectOptions struct {
	asyncCommits bool
	batches      bool
}

// ConnectBatches opens the pool a Store runs the worker's group-committed
// statements on (see BatchPool): Connect's pool, of batchMaxConns
// connections unless the DSN sets pool_max_conns, with batchSessions'
// settings.
//
// The statements are prepared once per connection. Planning
// ClaimDeliveries with each batch's values cost 0.5–0.75 ms, more than
// executing it, and RecordAttempts 0.27 ms: under load, a third of
// PostgreSQL's time went into planning the same few statements again and
// again. A generic plan is made once, though, with the table sizes of
// that moment: one made while deliveries held a page or two scans it, and
// keeps scanning it as the table grows, since only an ANALYZE invalidates
// it. Each statement reaches its rows by key (the batch's ids, joined to
// the primary key), so on these sessions the only plan left is the one
// that is right at every size: a nested loop over the batch, probing the
// primary key. The statements must not imply a partial index's predicate
// either, lest a full scan of that index be the cheapest way in (see
// ClaimDeliveries); TestBatchPlansProbeTheKey checks both.
func ConnectBatches(ctx context.Context, dsn string, opts ...ConnectOption) (*pgxpool.Pool, error) {
	return Connect(ctx, dsn, append(opts, func(o *connectOptions) { o.batches = true })...)
}

// batchSessions are the settings of ConnectBatches' sessions. They go
// without sequential scans and hash and merge joins: disabled, these
// remain the last resort of a query that has no other plan, and none of
// the batch statements is such a query. And they always use the generic
// plan: left to choose, PostgreSQL kept planning ClaimDeliveries for
// every batch, since its generic plan assumes a batch of ten or so, which
// costs more than the custom plan of a batch of two.
var batchSessions = map[string]string{
	"enable_seqscan":   "off",
	"enable_hashjoin":  "off",
	"enable_mergejoin": "off",
	"plan_cache_mode":  "force_generic_plan",
}

// batchMaxConns bounds ConnectBatches' pool: each of a Store's worker
// batchers (claims, attempts, releases) writes one batch at a time.
const batchMaxConns = 4

// AsyncCommits makes the pool's transactions commit without waiting for the
// WAL flush (synchronous_commit=off), unless the DSN sets synchronous_commit.
// It is for processes whose writes PostgreSQL state can afford to lose in a
// database crash: the worker's and scheduler's state changes (claims,
// attempts, postponements, fan-out, enqueue marks). A lost one only replays:
// a delivery goes back to its last durable state and is sent again
// (at-least-once), an event goes back to unfanned and is fanned out again.
// What must never be lost — an accepted event — is written by the API,
// whose pool keeps synchronous commits. Saves a WAL flush (~0.1 ms of disk
// wait, the box's main limit) per transaction.
func AsyncCommits() ConnectOption {
	return func(o *connectOptions) { o.asyncCommits = true }
}

// DefaultMaxConns is the pool size when the DSN does not set one: enough
// connections for the API's event writer, fan-out, the scheduler's scans
// and reads to overlap their round trips, and few enough that a handful of
// processes stay well under PostgreSQL's default max_connections of 100.
// The worker's claims and attempt records run on the batch pool
// (ConnectBatches, batchMaxConns more), so a process holds at most 16
// connections by default on up to 2 cores: four workers and an api with
// its scheduler hold 80 at most.
func DefaultMaxConns() int32 {
	return int32(max(12, 6*runtime.GOMAXPROCS(0)))
}

// redact names the server and database of cfg without the password.
func redact(cfg *pgxpool.Config) string {
	c := cfg.ConnConfig
	return fmt.Sprintf("postgres://%s@%s:%d/%s", c.User, c.Host, c.Port, c.Database)
}
