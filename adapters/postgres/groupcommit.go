package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/dispatch-webhooks/dispatch/adapters/groupcommit"
	"github.com/dispatch-webhooks/dispatch/adapters/postgres/sqlcgen"
)

// Limits of one group commit of events (see Store.CreateEvent). A batch of
// 512 1 KiB events is one ~0.5 MiB statement; the byte cap keeps a batch of
// large events from becoming a huge one.
const (
	maxEventBatch      = 512
	maxEventBatchBytes = 4 << 20
)

// newEventBatcher returns the group commit of events without an idempotency
// key: concurrent CreateEvent calls share one multi-row INSERT, so one round
// trip and one commit, instead of paying ~57 µs of commit each.
func (s *Store) newEventBatcher() *groupcommit.Batcher[sqlcgen.InsertEventParams] {
	return groupcommit.New(s.insertEvents, groupcommit.Limits[sqlcgen.InsertEventParams]{
		MaxItems:  maxEventBatch,
		MaxWeight: maxEventBatchBytes,
		Weigh:     eventRowSize,
	})
}

// eventRowSize is about what a row adds to the INSERT.
func eventRowSize(p sqlcgen.InsertEventParams) int {
	return len(p.ID) + len(p.Type) + len(p.Source) + len(p.Data) + len(p.OrderingKey) + 16
}

// insertEvents is the groupcommit.WriteFunc of events: the whole batch in
// one statement (InsertEvents), which commits every row or none.
//
// When PostgreSQL rejects the statement because of a row's content — a
// duplicate id (already stored, or twice in the batch) or another integrity
// or data error — nothing was written, and the innocent callers must not
// share the guilty one's error: every row is then tried again on its own
// (InsertEvent), so each caller gets the outcome of its own row, exactly as
// without batching. Any other failure (connection lost, ctx ended, server
// shutting down) gives every caller in the batch the same error; as with a
// single-row insert whose reply was lost, their rows may or may not be
// committed, and a publisher that retries gets at-least-once.
func (s *Store) insertEvents(ctx context.Context, rows []sqlcgen.InsertEventParams, errs []error) {
	if len(rows) == 1 {
		errs[0] = s.insertEvent(ctx, rows[0])
		return
	}
	params := sqlcgen.InsertEventsParams{
		Ids:          make([]string, len(rows)),
		Types:        make([]string, len(rows)),
		Sources:      make([]string, len(rows)),
		Data:         make([][]byte, len(rows)),
		OrderingKeys: make([]string, len(rows)),
		CreatedAts:   make([]time.Time, len(rows)),
	}
	for i, r := range rows {
		params.Ids[i] = r.ID
		params.Types[i] = r.Type
		params.Sources[i] = r.Source
		params.Data[i] = r.Data
		params.OrderingKeys[i] = r.OrderingKey
		params.CreatedAts[i] = r.CreatedAt
	}
	n, err := s.queries.InsertEvents(ctx, params)
	if err == nil && n != int64(len(rows)) {
		// A multi-row INSERT … SELECT stores every row or fails; this is a
		// broken invariant, not something a caller can act on.
		err = fmt.Errorf("batch insert stored %d of %d events", n, len(rows))
	}
	switch {
	case err == nil:
		return
	case rowRejected(err):
		for i, r := range rows {
			errs[i] = s.insertEvent(ctx, r)
		}
	default:
		for i := range rows {
			errs[i] = fmt.Errorf("batch insert of %d events: %w", len(rows), interpretError(err))
		}
	}
}

// insertEvent stores one event without an idempotency key (InsertEvent
// never finds a NULL key taken, so a row it does not store is an error).
func (s *Store) insertEvent(ctx context.Context, row sqlcgen.InsertEventParams) error {
	n, err := s.queries.InsertEvent(ctx, row)
	if err == nil && n != 1 {
		err = fmt.Errorf("insert stored %d rows", n)
	}
	return interpretError(err)
}

// rowRejected reports whether PostgreSQL refused a statement because of
// what a row holds: SQLSTATE class 23 (integrity constraint violation) or
// 22 (data exception). Such a statement wrote nothing, so its rows can be
// tried again one by one; other errors say nothing about any one row.
func rowRejected(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	return strings.HasPrefix(pgErr.Code, "23") || strings.HasPrefix(pgErr.Code, "22")
}
