-- Idempotency keys move to a table of their own: a key, the event that
-- owns it and since when. A key whose window ended is taken over by the
-- next event that brings it (Store.CreateEvent) or deleted by the
-- scheduler's sweep (Store.ExpireIdempotencyKeys, oldest first on
-- idempotency_keys_created_idx), so the table holds the keys of one
-- window whatever events keep. Events keep the key they were published
-- with, as history; only this table decides who owns a key.

-- +goose Up
CREATE TABLE idempotency_keys (
    key        text COLLATE "C" PRIMARY KEY,
    event_id   text COLLATE "C" NOT NULL,
    created_at timestamptz NOT NULL
);
INSERT INTO idempotency_keys (key, event_id, created_at)
    SELECT idempotency_key, id, created_at FROM events
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX idempotency_keys_created_idx ON idempotency_keys (created_at);
DROP INDEX events_idempotency_key_idx;

-- +goose Down
-- An event whose key another took over gives it up, so that the unique
-- index can return.
UPDATE events SET idempotency_key = NULL
WHERE idempotency_key IS NOT NULL AND NOT EXISTS (
    SELECT 1 FROM idempotency_keys k WHERE k.key = events.idempotency_key AND k.event_id = events.id);
CREATE UNIQUE INDEX events_idempotency_key_idx ON events (idempotency_key)
    WHERE idempotency_key IS NOT NULL;
DROP TABLE idempotency_keys;
