// Package pgtest gives tests a fresh, migrated PostgreSQL database of their
// own. The first use in a test process migrates a template database once
// (shared by every process running the same migrations); each NewDatabase
// call then clones it with CREATE DATABASE … TEMPLATE, which takes a few
// milliseconds, and drops the clone when the test ends. Tests therefore
// never clean up rows and never see each other's data, even when `go test`
// runs packages in parallel processes.
//
// Templates are named after a hash of the migrations, so changing a
// migration builds a new one; old ones stay until dropped by hand
// (ALTER DATABASE … IS_TEMPLATE false, then DROP DATABASE).
//
// Rule of dependency: test support only; imports the postgres adapter (for
// Migrate), migrations, pgx and the standard library.
package pgtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dispatch-webhooks/dispatch/adapters/postgres"
	"github.com/dispatch-webhooks/dispatch/migrations"
)

// DefaultURL is the server tests use when DATABASE_URL is not set: the
// local development PostgreSQL with trust authentication.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// startHint tells a developer how to start the local server.
const startHint = "start it with: pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start" +
	" (or point DATABASE_URL at another server)"

// templateLockKey is the pg_advisory_lock key under which processes build
// the template; any constant works as long as every process agrees.
const templateLockKey = 0x64697370746368 // "dispatch"

// server is the per-process state: the admin pool and the template name.
var server struct {
	mu       sync.Mutex
	ready    bool
	baseURL  string
	admin    *pgxpool.Pool
	template string
}

// NewDatabase creates a fresh database with every migration applied and
// returns its connection string. The database is dropped when tb ends. Call
// it once per test for full isolation, or once per package (from TestMain
// or a shared helper) for less overhead. Its history tables have only
// their legacy partitions (migration 00018): whatever runs on it makes the
// windows it writes to (postgres.Store.MaintainHistory, as every Dispatch
// process does on start).
func NewDatabase(tb testing.TB) string {
	tb.Helper()
	admin, template, baseURL := setUp(tb)

	name := "dispatch_test_" + randomSuffix()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	create := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize() +
		" TEMPLATE " + pgx.Identifier{template}.Sanitize()
	for {
		_, err := admin.Exec(ctx, create)
		if err == nil {
			break
		}
		// 55006 object_in_use: another backend is briefly connected to the
		// template (another process still closing its build connection).
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "55006" && ctx.Err() == nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		tb.Fatalf("pgtest: create database %s from template %s: %v", name, template, err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// FORCE ends connections a test forgot to close.
		if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			tb.Errorf("pgtest: drop database %s: %v", name, err)
		}
	})
	return withDatabaseURL(baseURL, name)
}

// NewPool is NewDatabase with a connection pool to the new database; the
// pool is closed before the database is dropped.
// Its history tables take rows of any time: a partition from the legacy
// one's end to MAXVALUE stands in for the windows (store tests write at
// fixed times, years ahead).
func NewPool(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	pool := open(tb, NewDatabase(tb), postgres.Connect)
	OpenEnded(tb, pool)
	return pool
}

// NewPools is NewPool with a second pool to the same database, from
// postgres.ConnectBatches, for postgres.BatchPool: the pools a deployed
// Store runs on. Both are closed before the database is dropped.
func NewPools(tb testing.TB) (pool, batch *pgxpool.Pool) {
	tb.Helper()
	dsn := NewDatabase(tb)
	pool = open(tb, dsn, postgres.Connect)
	OpenEnded(tb, pool)
	return pool, open(tb, dsn, postgres.ConnectBatches)
}

// OpenEnded adds to each history table of pool's database a partition
// from its legacy partition's end to MAXVALUE, so the tables take rows of
// any time without windows (NewPool does it).
func OpenEnded(tb testing.TB, pool *pgxpool.Pool) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := pool.Exec(ctx, `DO $$
DECLARE
    t text;
    upper text;
BEGIN
    FOREACH t IN ARRAY ARRAY['events', 'deliveries', 'attempts'] LOOP
        SELECT substring(pg_get_expr(c.relpartbound, c.oid) FROM 'TO \(''([^'']*)''\)') INTO upper
        FROM pg_class c WHERE c.relname = t || '_legacy';
        -- deliveries are updated in place (fillfactor 70, migration 00006).
        EXECUTE format('CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%L) TO (MAXVALUE) %s',
            t || '_rest', t, upper, CASE WHEN t = 'deliveries' THEN 'WITH (fillfactor = 70)' ELSE '' END);
    END LOOP;
END
$$`)
	if err != nil {
		tb.Fatalf("pgtest: open-ended partitions: %v", err)
	}
}

// open connects a pool to dsn and closes it when tb ends. The server's
// connection slots are shared by every test package running at once, so a
// connection refused for want of one (53300 too_many_connections) is tried
// again until the others give some back, for up to 30 s.
func open(tb testing.TB, dsn string, connect func(context.Context, string, ...postgres.ConnectOption) (*pgxpool.Pool, error)) *pgxpool.Pool {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := connect(ctx, dsn)
	for err != nil && tooManyConnections(err) && ctx.Err() == nil {
		time.Sleep(100 * time.Millisecond)
		pool, err = connect(ctx, dsn)
	}
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

func tooManyConnections(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "53300"
}

// setUp connects to the server and builds the template, once per process.
// It is not a sync.Once: a failure must fail every test that asks, with the
// same message, rather than only the first.
func setUp(tb testing.TB) (admin *pgxpool.Pool, template, baseURL string) {
	tb.Helper()
	server.mu.Lock()
	defer server.mu.Unlock()
	if server.ready {
		return server.admin, server.template, server.baseURL
	}
	baseURL = os.Getenv("DATABASE_URL")
	if baseURL == "" {
		baseURL = DefaultURL
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg, err := pgxpool.ParseConfig(baseURL)
	if err != nil {
		tb.Fatalf("pgtest: DATABASE_URL %q is not a valid connection string: %v", baseURL, err)
	}
	cfg.MaxConns = 4
	admin, err = pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		pingCtx, cancelPing := context.WithTimeout(ctx, 5*time.Second)
		err = admin.Ping(pingCtx)
		cancelPing()
	}
	if err != nil {
		tb.Fatalf("pgtest: PostgreSQL is not reachable at %s: %v\n%s", baseURL, err, startHint)
	}
	template, err = migrationsHash()
	if err != nil {
		tb.Fatalf("pgtest: hash migrations: %v", err)
	}
	template = "dispatch_tmpl_" + template
	if err := ensureTemplate(ctx, admin, baseURL, template); err != nil {
		admin.Close()
		tb.Fatalf("pgtest: build template database %s on %s: %v", template, baseURL, err)
	}
	// The admin pool lives as long as the process: every test's cleanup
	// uses it to drop its database.
	server.admin, server.template, server.baseURL, server.ready = admin, template, baseURL, true
	return admin, template, baseURL
}

// ensureTemplate creates and migrates the template database unless a
// complete one exists. It builds under another name and renames at the end,
// so a process killed halfway never leaves a half-migrated template behind,
// and holds an advisory lock so concurrent test processes build it once.
func ensureTemplate(ctx context.Context, admin *pgxpool.Pool, baseURL, template string) error {
	conn, err := admin.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", int64(templateLockKey)); err != nil {
		return fmt.Errorf("take advisory lock: %w", err)
	}
	defer func() {
		_, _ = conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", int64(templateLockKey))
	}()

	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", template).Scan(&exists); err != nil {
		return err
	}
	if exists {
		return nil
	}
	building := template + "_building"
	for _, stmt := range []string{
		"DROP DATABASE IF EXISTS " + pgx.Identifier{building}.Sanitize() + " WITH (FORCE)",
		"CREATE DATABASE " + pgx.Identifier{building}.Sanitize(),
	} {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			return err
		}
	}
	pool, err := pgxpool.New(ctx, withDatabaseURL(baseURL, building))
	if err != nil {
		return err
	}
	err = postgres.Migrate(ctx, pool)
	pool.Close()
	if err != nil {
		return err
	}
	for _, stmt := range []string{
		"ALTER DATABASE " + pgx.Identifier{building}.Sanitize() + " RENAME TO " + pgx.Identifier{template}.Sanitize(),
		// Nobody connects to the template, so cloning it never finds it busy.
		"ALTER DATABASE " + pgx.Identifier{template}.Sanitize() + " WITH IS_TEMPLATE true ALLOW_CONNECTIONS false",
	} {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			return err
		}
	}
	return nil
}

// migrationsHash names the template after the migrations' content, so a
// changed migration gets a new template instead of a stale one.
func migrationsHash() (string, error) {
	names, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil {
		return "", err
	}
	sort.Strings(names)
	h := sha256.New()
	for _, name := range names {
		b, err := fs.ReadFile(migrations.FS, name)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", name, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// randomSuffix makes database names unique across parallel test processes.
func randomSuffix() string {
	return strings.ToLower(rand.Text()[:16])
}

// withDatabaseURL replaces the database of a URL or keyword/value
// connection string.
func withDatabaseURL(baseURL, name string) string {
	if u, err := url.Parse(baseURL); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		u.Path = "/" + name
		return u.String()
	}
	// Keyword/value form: a later dbname overrides an earlier one.
	return baseURL + " dbname=" + name
}
