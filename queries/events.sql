-- name: InsertEvent :execrows
-- Stores the event unless its idempotency key is taken; 0 rows means the key
-- belongs to another event. A NULL key never conflicts. A duplicate id is
-- still a unique violation.
INSERT INTO events (
    id, type, source, data, ordering_key, idempotency_key, status, created_at
) VALUES (
    @id, @type, @source, @data, @ordering_key, sqlc.narg(idempotency_key), @status, @created_at
)
ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING;

-- name: EventByIdempotencyKey :one
SELECT * FROM events WHERE idempotency_key = @idempotency_key::text;

-- name: ReleaseIdempotencyKey :exec
-- Frees an expired key for a new event. The condition is re-checked on the
-- latest row version, so two callers releasing one key both succeed safely.
UPDATE events SET idempotency_key = NULL
WHERE id = @id AND idempotency_key = @idempotency_key::text AND created_at <= @kept_since;

-- name: GetEvent :one
SELECT * FROM events WHERE id = @id;

-- name: GetEvents :many
SELECT * FROM events WHERE id = ANY(@ids::text[]);

-- name: UnfannedEvents :many
SELECT id FROM events
WHERE fanned_out_at IS NULL AND created_at < @older_than
ORDER BY created_at, id
LIMIT @max_rows;
