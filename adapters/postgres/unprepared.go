package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dispatch-webhooks/dispatch/adapters/postgres/sqlcgen"
)

// unprepared runs queries as unnamed statements, which PostgreSQL plans
// with the parameter values of each execution. pgx's default caches a
// prepared statement per connection, and after five executions PostgreSQL
// may switch such a statement to a generic plan, made without the values.
// That is right for the hot path's fixed-shape queries and wrong for a query
// like ListDeliveries, whose optional filters ($1 IS NULL OR col = $1) fold
// away only when the values are known: a generic plan keeps the ORs and can
// use no index but the primary key.
//
// The scheduler's scans and FanOut run unprepared too, and so do the
// worker's batch statements (ClaimDeliveries, RecordAttempts,
// ReleaseDeliveries) on a Store without a BatchPool. Their generic plan
// is made once per connection, with the table sizes of that moment: a
// connection that made it while deliveries was a page or two long joined
// the batch to a sequential scan of deliveries, and kept doing so as the
// table grew (seen in W3: 83 million rows read by sequential scans in a
// minute, and deliveries falling from 1,700/s to 130/s, on a PostgreSQL
// without autovacuum, whose ANALYZE would have invalidated the plan).
// Planned with each batch's values, and the table as it is, they probe
// the primary key, at the price of a parse and a plan per batch; a
// BatchPool's sessions make the probe the only plan instead (see
// ConnectBatches).
type unprepared struct {
	db   sqlcgen.DBTX
	mode pgx.QueryExecMode
}

// newUnprepared wraps pool. On a pool that caches prepared statements
// (pgx's default) the queries run in cache_describe mode: each is still an
// unnamed statement, parsed and planned with its values, but pgx keeps its
// parameter and result types per connection, so the parameters go in
// binary. In exec mode, which needs no description, pgx sends them as
// text, and PostgreSQL parses each element of every array: FanOut's nine
// arrays (three of timestamps) make a batch noticeably slower that way
// (BenchmarkCreateDeliveries shows it). The cached types hold as
// long as the schema does: every parameter is cast in the query's text,
// and migrations run before a role starts. Without a description cache
// (description_cache_capacity=0 in the DSN) they run in exec mode; a pool
// already configured not to cache statements (cache_describe, exec,
// simple_protocol, describe_exec) keeps its mode.
func newUnprepared(pool *pgxpool.Pool) unprepared {
	cfg := pool.Config().ConnConfig
	mode := cfg.DefaultQueryExecMode
	if mode == pgx.QueryExecModeCacheStatement {
		mode = pgx.QueryExecModeCacheDescribe
		if cfg.DescriptionCacheCapacity == 0 {
			mode = pgx.QueryExecModeExec // a DSN turned the cache off
		}
	}
	return unprepared{db: pool, mode: mode}
}

// withMode passes the mode as pgx's per-query first argument.
func (u unprepared) withMode(args []any) []any {
	return append([]any{u.mode}, args...)
}

func (u unprepared) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return u.db.Exec(ctx, sql, u.withMode(args)...)
}

func (u unprepared) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return u.db.Query(ctx, sql, u.withMode(args)...)
}

func (u unprepared) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return u.db.QueryRow(ctx, sql, u.withMode(args)...)
}
