package postgres

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/dispatch-webhooks/dispatch/adapters/keyring"
	"github.com/dispatch-webhooks/dispatch/adapters/postgres/sqlcgen"
)

// ReencryptBatch is how many subscriptions Reencrypt reads, locks and
// rewrites per transaction by default: few enough that an update of one
// of them waits for at most one short transaction.
const ReencryptBatch = 500

// Reencrypt seals every subscription's secrets and headers under the first
// key of the Store's ring (see Encryption): values in the clear and values
// sealed under another key of the ring. It returns how many rows it
// rewrote. Rows already sealed under the first key are left as they are,
// so running it again rewrites none, and once it has run a key that is no
// longer first can be removed from the ring.
//
// It walks the table in id order, batch rows per transaction, each batch
// locked (FOR UPDATE) while it is rewritten, so concurrent updates are
// neither lost nor held for longer than one batch. A row it cannot open
// (sealed under a key the ring lacks) stops it with an error naming the
// row; the rows of earlier batches stay rewritten.
func (s *Store) Reencrypt(ctx context.Context, batch int) (int, error) {
	if !s.ring.Enabled() {
		return 0, fmt.Errorf("reencrypt: %w", keyring.ErrNoKeys)
	}
	if batch < 1 {
		return 0, fmt.Errorf("reencrypt: batch must be at least 1, got %d", batch)
	}
	rewritten, after := 0, ""
	for {
		var read, n int
		err := s.inTx(ctx, func(q *sqlcgen.Queries) error {
			rows, err := q.SealedColumnsForUpdate(ctx, sqlcgen.SealedColumnsForUpdateParams{After: after, MaxRows: int32(batch)})
			if err != nil {
				return interpretError(err)
			}
			read = len(rows)
			if read == 0 {
				return nil
			}
			after = rows[read-1].ID
			params := sqlcgen.RewriteSealedColumnsParams{Ids: []string{}, Secrets: []string{}, PreviousSecrets: []string{}, Headers: [][]byte{}}
			for _, row := range rows {
				if s.sealedByFirst(row) {
					continue
				}
				secret, previous, headers, err := s.sealAgain(row)
				if err != nil {
					return fmt.Errorf("subscription %s: %w", row.ID, err)
				}
				params.Ids = append(params.Ids, row.ID)
				params.Secrets = append(params.Secrets, secret)
				params.PreviousSecrets = append(params.PreviousSecrets, previous)
				params.Headers = append(params.Headers, headers)
			}
			n = len(params.Ids)
			if n == 0 {
				return nil
			}
			return interpretError(q.RewriteSealedColumns(ctx, params))
		})
		if err != nil {
			return rewritten, fmt.Errorf("reencrypt after %d rows: %w", rewritten, err)
		}
		rewritten += n
		if read < batch {
			return rewritten, nil
		}
	}
}

// sealedByFirst reports whether every sealed column of row is empty or
// sealed under the ring's first key already.
func (s *Store) sealedByFirst(row sqlcgen.SealedColumnsForUpdateRow) bool {
	for _, v := range []string{row.Secret, row.PreviousSecret} {
		if v != "" && !s.ring.SealedByFirst(v) {
			return false
		}
	}
	if bytes.Equal(bytes.TrimSpace(row.Headers), []byte("{}")) {
		return true
	}
	var sealed string
	if err := json.Unmarshal(row.Headers, &sealed); err != nil {
		return false // an object in the clear (or null)
	}
	return s.ring.SealedByFirst(sealed)
}

// sealAgain opens row's sealed columns and seals them under the first key.
func (s *Store) sealAgain(row sqlcgen.SealedColumnsForUpdateRow) (secret, previous string, headers []byte, err error) {
	for _, c := range []struct {
		column string
		value  *string
		stored string
	}{{columnSecret, &secret, row.Secret}, {columnPreviousSecret, &previous, row.PreviousSecret}} {
		plain, err := openText(s.ring, row.ID, c.column, c.stored)
		if err != nil {
			return "", "", nil, fmt.Errorf("%s: %w", c.column, err)
		}
		if *c.value, err = sealText(s.ring, row.ID, c.column, plain); err != nil {
			return "", "", nil, err
		}
	}
	opened, err := openHeaders(s.ring, row.ID, row.Headers)
	if err != nil {
		return "", "", nil, fmt.Errorf("headers: %w", err)
	}
	headers, err = sealHeaders(s.ring, row.ID, opened)
	if err != nil {
		return "", "", nil, err
	}
	return secret, previous, headers, nil
}
