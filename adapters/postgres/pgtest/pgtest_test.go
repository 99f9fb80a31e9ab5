package pgtest

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dispatch-webhooks/dispatch/adapters/postgres"
)

// TestOpenWaitsForAConnectionSlot connects as a role allowed no connection
// (53300, as when the server is full), then lets it connect: open waits
// instead of failing the test.
func TestOpenWaitsForAConnectionSlot(t *testing.T) {
	dsn := NewDatabase(t)
	admin, _, _ := setUp(t)
	ctx := context.Background()
	role := "pgtest_full_" + randomSuffix()
	ident := pgx.Identifier{role}.Sanitize()
	if _, err := admin.Exec(ctx, "CREATE ROLE "+ident+" LOGIN CONNECTION LIMIT 0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), "DROP ROLE IF EXISTS "+ident) })
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)

	opened := make(chan struct{})
	go func() {
		defer close(opened)
		open(t, u.String(), postgres.Connect).Close()
	}()
	select {
	case <-opened:
		t.Fatal("open returned while the role could not connect")
	case <-time.After(300 * time.Millisecond):
	}
	if _, err := admin.Exec(ctx, "ALTER ROLE "+ident+" CONNECTION LIMIT 10"); err != nil {
		t.Fatal(err)
	}
	<-opened
}
