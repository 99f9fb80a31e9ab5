package postgres

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The mode newUnprepared picks for each pool configuration: binary
// parameters (cache_describe) wherever pgx can describe the statement once
// per connection, exec where the DSN turned the description cache off, and
// the pool's own mode where it already does not prepare.
func TestUnpreparedMode(t *testing.T) {
	cases := []struct {
		dsnOptions string
		want       pgx.QueryExecMode
	}{
		{"", pgx.QueryExecModeCacheDescribe},
		{"&default_query_exec_mode=cache_statement", pgx.QueryExecModeCacheDescribe},
		{"&description_cache_capacity=0", pgx.QueryExecModeExec},
		{"&default_query_exec_mode=cache_describe", pgx.QueryExecModeCacheDescribe},
		{"&default_query_exec_mode=exec", pgx.QueryExecModeExec},
		{"&default_query_exec_mode=describe_exec", pgx.QueryExecModeDescribeExec},
		{"&default_query_exec_mode=simple_protocol", pgx.QueryExecModeSimpleProtocol},
	}
	for _, c := range cases {
		cfg, err := pgxpool.ParseConfig("postgres://nobody@127.0.0.1:1/none?sslmode=disable" + c.dsnOptions)
		if err != nil {
			t.Fatal(err)
		}
		pool, err := pgxpool.NewWithConfig(t.Context(), cfg) // connects lazily: nothing listens on port 1
		if err != nil {
			t.Fatal(err)
		}
		if got := newUnprepared(pool).mode; got != c.want {
			t.Errorf("%q: mode %v, want %v", c.dsnOptions, got, c.want)
		}
		pool.Close()
	}
}
