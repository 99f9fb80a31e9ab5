package postgres

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/dispatch-webhooks/dispatch/domain"
)

// SQLSTATE codes the store turns into domain errors.
const (
	uniqueViolation     = "23505"
	foreignKeyViolation = "23503"
)

// interpretError maps a pgx error to the domain's sentinels, once, so no
// pgx or SQLSTATE detail reaches callers: a missing row is
// domain.ErrNotFound; a duplicate key, or a reference to a row that is gone
// (a subscription deleted while its event was being fanned out), is
// domain.ErrConflict. Anything else is returned unchanged.
func interpretError(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return domain.ErrNotFound
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case uniqueViolation:
			return fmt.Errorf("%w: duplicate key (%s)", domain.ErrConflict, pgErr.ConstraintName)
		case foreignKeyViolation:
			return fmt.Errorf("%w: referenced row does not exist (%s)", domain.ErrConflict, pgErr.ConstraintName)
		}
	}
	return err
}
