package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/dispatch-webhooks/dispatch/migrations"
)

// Migrate applies every pending migration in migrations.FS to the database
// behind pool and returns once the schema is current; an up-to-date
// database is left untouched. A PostgreSQL session lock serialises
// concurrent callers, so replicas that all migrate on start (`dispatch all`)
// do not race each other. The migrations run on sessions of their own,
// without the pool's statement_timeout: rewriting a large table may take
// longer.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	cfg := pool.Config()
	cfg.ConnConfig.RuntimeParams["statement_timeout"] = "0"
	cfg.MinConns, cfg.MaxConns = 0, 4
	own, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("migrate: connect: %w", err)
	}
	defer own.Close()
	db := stdlib.OpenDBFromPool(own)
	defer func() { _ = db.Close() }() // the pool it wraps closes above
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return fmt.Errorf("migrate: session lock: %w", err)
	}
	provider, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS,
		goose.WithSessionLocker(locker))
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if _, err := provider.Up(ctx); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}
