package httpapi

import (
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/dispatch-webhooks/dispatch/domain"
)

// refuseNonText answers 422, naming the parameter, to a request whose path,
// query or header parameter (those the operation declares) is not text:
// invalid UTF-8 or a NUL. Such a value can name nothing Dispatch stores,
// and PostgreSQL refuses it as a query parameter, which made it a 500.
// Bodies are checked where they are decoded (domain.NewEvent and
// Subscription.Validate), with their fields' names.
func refuseNonText(api huma.API) func(huma.Context, func(huma.Context)) {
	return func(ctx huma.Context, next func(huma.Context)) {
		op := ctx.Operation()
		if op == nil {
			next(ctx)
			return
		}
		for _, p := range op.Parameters {
			var v string
			switch p.In {
			case "path":
				v = ctx.Param(p.Name)
			case "query":
				v = ctx.Query(p.Name)
			case "header":
				v = ctx.Header(p.Name)
			default:
				continue
			}
			if problem := domain.TextProblem(v); problem != "" {
				_ = huma.WriteErr(api, ctx, http.StatusUnprocessableEntity, "validation failed", &huma.ErrorDetail{
					Location: p.In + "." + p.Name, Message: problem,
				})
				return
			}
		}
		next(ctx)
	}
}
