-- An idempotency key leaves the unique index when its window ends
-- (Store.ExpireIdempotencyKeys, run by the scheduler): the key is set to
-- NULL, the event stays. This index finds the keyed events by age, so the
-- sweep reads only expired keys, oldest first, whatever the table holds.

-- +goose Up
CREATE INDEX events_idempotency_created_idx ON events (created_at)
    WHERE idempotency_key IS NOT NULL;

-- +goose Down
DROP INDEX events_idempotency_created_idx;
