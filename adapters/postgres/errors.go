package postgres

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/dispatch-webhooks/dispatch/domain"
)

// uniqueViolation is the SQLSTATE the store turns into domain.ErrConflict.
const uniqueViolation = "23505"

// interpretError maps a pgx error to the domain's sentinels, once, so no
// pgx or SQLSTATE detail reaches callers: a missing row is
// domain.ErrNotFound; a duplicate key is domain.ErrConflict. Anything else
// is returned unchanged. (The schema has no foreign keys since migration
// 00012: the statements keep references themselves.)
func interpretError(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return domain.ErrNotFound
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == uniqueViolation {
		return fmt.Errorf("%w: duplicate key (%s)", domain.ErrConflict, pgErr.ConstraintName)
	}
	return err
}
