package httpapi

import (
	"cmp"
	"context"
	"errors"
	"log/slog"

	"github.com/danielgtaylor/huma/v2"

	"github.com/dispatch-webhooks/dispatch/domain"
)

// problem maps an error from a use case to the problem+json answer. It is
// the only place that chooses a status code for a domain error.
func problem(ctx context.Context, log *slog.Logger, err error) error {
	var invalid *domain.ValidationError
	switch {
	case errors.As(err, &invalid):
		return huma.Error422UnprocessableEntity("validation failed", &huma.ErrorDetail{
			Location: cmp.Or(invalid.In, "body") + "." + invalid.Field,
			Message:  invalid.Message,
		})
	case errors.Is(err, domain.ErrNotFound):
		return huma.Error404NotFound(err.Error())
	case errors.Is(err, domain.ErrConflict):
		return huma.Error409Conflict(err.Error())
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded):
		// Whatever failed, it failed for want of time: the store answered
		// too slowly for the request's deadline.
		return huma.Error503ServiceUnavailable("the request did not finish within its deadline; try again")
	default:
		log.ErrorContext(ctx, "request failed", "error", err)
		return huma.Error500InternalServerError("internal error; see the server log")
	}
}
