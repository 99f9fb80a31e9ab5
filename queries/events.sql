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

-- name: MarkEventsFannedOut :many
-- Claims the fan-out of the given events that are not fanned out yet and
-- returns their ids; an event listed in @no_deliveries is delivered at once
-- (nothing to do). Rows are locked in id order, so concurrent fan-outs of
-- overlapping batches cannot deadlock, and the second one finds the events
-- already fanned out and skips them.
UPDATE events SET
    fanned_out_at = now(),
    status = CASE WHEN events.id = ANY(@no_deliveries::text[]) THEN 'delivered' ELSE events.status END
WHERE events.id IN (
    SELECT e.id FROM events e
    WHERE e.id = ANY(@ids::text[]) AND e.fanned_out_at IS NULL
    ORDER BY e.id
    FOR UPDATE
)
AND events.fanned_out_at IS NULL
RETURNING events.id;
