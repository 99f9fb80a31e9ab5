package bootstrap_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/fx"

	"github.com/dispatch-webhooks/dispatch/bootstrap"
)

// While PostgreSQL makes a request wait (a transaction holds the events
// table), the request ends at its deadline with a 503 problem instead of
// waiting for the lock: a publish, served natively, and a read of an
// event, served through net/http.
func TestRequestsEndByTheirDeadlineWhenPostgreSQLStalls(t *testing.T) {
	t.Parallel()
	const timeout = 500 * time.Millisecond
	var api *bootstrap.APIServer
	c := newClusterWith(t, func(cfg *bootstrap.Config) { cfg.RequestTimeout = timeout }, fx.Populate(&api))
	eventID := c.publish("order.created", `{}`)

	ctx := context.Background()
	conn, err := pgx.Connect(ctx, c.cfg.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(ctx) })
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	if _, err := tx.Exec(ctx, "LOCK TABLE events IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}

	client := &http.Client{Timeout: 20 * timeout}
	for _, r := range []struct{ method, path, body string }{
		{http.MethodPost, "/v1/events", `{"type":"order.created","source":"test","data":{}}`},
		{http.MethodGet, "/v1/events/" + eventID, ""},
	} {
		req, err := http.NewRequest(r.method, "http://"+api.Addr()+r.path, strings.NewReader(r.body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+testKey)
		req.Header.Set("Content-Type", "application/json")
		start := time.Now()
		res, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s while PostgreSQL waits on a lock: %v", r.method, r.path, err)
		}
		body, _ := io.ReadAll(res.Body)
		_ = res.Body.Close()
		took := time.Since(start)
		if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s %s: %d %s %s, want a 503 problem", r.method, r.path, res.StatusCode, res.Header.Get("Content-Type"), body)
		}
		if took > 10*timeout {
			t.Errorf("%s %s took %s with a request timeout of %s", r.method, r.path, took, timeout)
		}
	}
}
