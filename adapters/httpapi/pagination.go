package httpapi

import (
	"context"
	"encoding/base64"
	"strconv"
	"strings"

	"github.com/danielgtaylor/huma/v2"

	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// Cursors are the last id of a page, opaque to clients: ids sort by creation
// time, so "id > cursor" is stable under concurrent inserts.
const cursorPrefix = "c1:"

func encodeCursor(lastID string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(cursorPrefix + lastID))
}

func decodeCursor(cursor string) (string, error) {
	if cursor == "" {
		return "", nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil || !strings.HasPrefix(string(raw), cursorPrefix) || len(raw) == len(cursorPrefix) || domain.TextProblem(string(raw)) != "" {
		return "", errInvalidCursor(cursor)
	}
	return strings.TrimPrefix(string(raw), cursorPrefix), nil
}

func errInvalidCursor(cursor string) error {
	return huma.Error400BadRequest("invalid cursor", &huma.ErrorDetail{
		Location: "query.cursor", Message: "is not a cursor returned by this API", Value: cursor,
	})
}

// An event's attempts are ordered by subscription id then attempt number,
// so their cursor is a cursor whose key holds both: "<subscription id>/<n>".
func attemptCursorKey(a domain.Attempt) string {
	return a.SubscriptionID + "/" + strconv.Itoa(a.Number)
}

func decodeAttemptCursor(cursor string) (ports.AttemptPage, error) {
	key, err := decodeCursor(cursor)
	if err != nil || key == "" {
		return ports.AttemptPage{}, err
	}
	sub, number, ok := strings.Cut(key, "/")
	n, err := strconv.Atoi(number)
	if !ok || sub == "" || err != nil || n < 1 {
		return ports.AttemptPage{}, errInvalidCursor(cursor)
	}
	return ports.AttemptPage{AfterSubscription: sub, AfterAttempt: n}, nil
}

// paginate trims items fetched with limit+1 to limit and returns the next
// cursor, nil when there is no further page.
func paginate[T any](items []T, limit int, id func(T) string) ([]T, *string) {
	if len(items) <= limit {
		return items, nil
	}
	items = items[:limit]
	next := encodeCursor(id(items[len(items)-1]))
	return items, &next
}

// listPage serves one page of a list endpoint: it decodes the cursor,
// fetches one item more than asked to learn whether another page follows,
// and renders the items.
func listPage[T, J any](ctx context.Context, h *handlers, cursor string, limit int,
	fetch func(context.Context, ports.Page) ([]T, error), id func(T) string, render func(T) J,
) (List[J], error) {
	after, err := decodeCursor(cursor)
	if err != nil {
		return List[J]{}, err
	}
	items, err := fetch(ctx, ports.Page{After: after, Limit: limit + 1})
	if err != nil {
		return List[J]{}, problem(ctx, h.log, err)
	}
	page, next := paginate(items, limit, id)
	out := List[J]{Data: make([]J, len(page)), NextCursor: next}
	for i, item := range page {
		out.Data[i] = render(item)
	}
	return out, nil
}
