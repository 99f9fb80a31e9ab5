-- name: FanOut :many
-- Records the fan-out of a batch of events in one statement, so one round
-- trip and one commit whatever the batch size:
--
-- 1. claimed: marks the listed events that are not fanned out yet, and
--    completes those in @no_deliveries (nothing to do). Rows are locked in
--    id order, so concurrent fan-outs of overlapping batches cannot
--    deadlock; the later one re-checks fanned_out_at on the committed row
--    and skips the event, which makes fan-out idempotent.
-- 2. inserted: stores the deliveries of the claimed events only, as one
--    multi-row insert (set-returning functions in the select list are
--    zipped row by row). New deliveries count as enqueued at creation: the
--    caller appends them to the queue right after the commit.
WITH claimed AS (
    UPDATE events SET
        fanned_out_at = now(),
        status = CASE WHEN events.id = ANY(@no_deliveries::text[]) THEN 'delivered' ELSE events.status END
    WHERE events.id IN (
        SELECT e.id FROM events e
        WHERE e.id = ANY(@event_ids::text[]) AND e.fanned_out_at IS NULL
        ORDER BY e.id
        FOR UPDATE
    )
    AND events.fanned_out_at IS NULL
    RETURNING events.id
), inserted AS (
    INSERT INTO deliveries (
        id, event_id, subscription_id, status, attempts, next_attempt_at,
        ordering_key, created_at, updated_at, enqueued_at
    )
    SELECT
        u.id, u.event_id, u.subscription_id, u.status, u.attempts, u.next_attempt_at,
        u.ordering_key, u.created_at, u.updated_at, u.created_at
    FROM (
        SELECT
            unnest(@ids::text[]) AS id,
            unnest(@delivery_event_ids::text[]) AS event_id,
            unnest(@subscription_ids::text[]) AS subscription_id,
            unnest(@statuses::text[]) AS status,
            unnest(@attempts::integer[]) AS attempts,
            unnest(@next_attempt_ats::timestamptz[]) AS next_attempt_at,
            unnest(@ordering_keys::text[]) AS ordering_key,
            unnest(@created_ats::timestamptz[]) AS created_at,
            unnest(@updated_ats::timestamptz[]) AS updated_at
    ) AS u
    WHERE u.event_id IN (SELECT claimed.id FROM claimed)
    RETURNING deliveries.id
)
SELECT inserted.id FROM inserted;

-- name: ClaimDelivery :one
-- The worker's hot path: takes a due delivery (pending or retrying and due,
-- or delivering with an expired lease), leases it until @lease_until, and
-- returns it with its event and subscription in one round trip.
WITH claimed AS (
    UPDATE deliveries SET
        status = 'delivering',
        next_attempt_at = @lease_until,
        updated_at = @now
    WHERE deliveries.id = @id
      AND deliveries.status IN ('pending', 'retrying', 'delivering')
      AND deliveries.next_attempt_at <= @now
    RETURNING deliveries.*
)
SELECT
    claimed.id, claimed.event_id, claimed.subscription_id, claimed.status,
    claimed.attempts, claimed.next_attempt_at, claimed.last_status_code,
    claimed.last_error, claimed.reason, claimed.ordering_key,
    claimed.created_at, claimed.updated_at,
    sqlc.embed(events), sqlc.embed(subscriptions)
FROM claimed
JOIN events ON events.id = claimed.event_id
JOIN subscriptions ON subscriptions.id = claimed.subscription_id;

-- name: DeliveryExists :one
SELECT EXISTS (SELECT 1 FROM deliveries WHERE id = @id);

-- name: RecordAttempt :one
-- Stores the delivery's new state and its attempt in one statement. The
-- enqueued mark is cleared so the scheduler's scan picks a retrying delivery
-- up as soon as it is due. With @lock_event (the delivery became terminal)
-- it also locks the event row until the transaction ends, which serialises
-- the status roll-up (RollUpEventStatus) of the event's deliveries: whoever
-- takes the lock second sees the first one's terminal delivery. Returns no
-- row when the delivery does not exist.
WITH updated AS (
    UPDATE deliveries SET
        status = @status,
        attempts = @attempts,
        next_attempt_at = @next_attempt_at,
        last_status_code = sqlc.narg(last_status_code),
        last_error = @last_error,
        reason = @reason,
        enqueued_at = NULL,
        updated_at = @updated_at
    WHERE deliveries.id = @id
    RETURNING deliveries.id, deliveries.event_id, deliveries.subscription_id
), inserted AS (
    INSERT INTO attempts (
        delivery_id, subscription_id, attempt, status_code, response_body,
        error, duration, created_at
    )
    SELECT
        updated.id, updated.subscription_id, @attempt, sqlc.narg(status_code),
        @response_body, @error, @duration, @attempt_created_at
    FROM updated
    RETURNING attempts.delivery_id
), locked AS (
    SELECT events.id FROM events
    WHERE @lock_event::boolean AND events.id = (SELECT updated.event_id FROM updated)
    FOR UPDATE
)
SELECT updated.event_id
FROM updated
JOIN inserted ON inserted.delivery_id = updated.id
LEFT JOIN locked ON locked.id = updated.event_id;

-- name: RollUpEventStatus :exec
-- Once every delivery of the event is terminal, the event is failed if any
-- is dead and delivered otherwise. Run after RecordAttempt locked the event,
-- in the same transaction, so this statement's snapshot includes every
-- delivery that finished before.
UPDATE events SET status = CASE
        WHEN EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = @id AND d.status = 'dead')
        THEN 'failed' ELSE 'delivered' END
WHERE events.id = @id
  AND NOT EXISTS (
    SELECT 1 FROM deliveries d
    WHERE d.event_id = @id AND d.status IN ('pending', 'retrying', 'delivering')
  );

-- name: GetDelivery :one
SELECT * FROM deliveries WHERE id = @id;

-- name: EventDeliveries :many
SELECT * FROM deliveries WHERE event_id = @event_id ORDER BY id;

-- name: EventAttempts :many
SELECT a.* FROM attempts a
JOIN deliveries d ON d.id = a.delivery_id
WHERE d.event_id = @event_id
ORDER BY a.delivery_id, a.attempt;

-- name: DueDeliveries :many
-- The scheduler's scan: due, non-terminal deliveries not enqueued since
-- @enqueued_before, oldest first. SKIP LOCKED lets scans run in parallel,
-- and a row another scan marked meanwhile fails the re-checked condition, so
-- no delivery is returned twice.
WITH due AS (
    SELECT d.id FROM deliveries d
    WHERE d.status IN ('pending', 'retrying', 'delivering')
      AND d.next_attempt_at <= @now
      AND (d.enqueued_at IS NULL OR d.enqueued_at <= @enqueued_before::timestamptz)
    ORDER BY d.next_attempt_at, d.id
    LIMIT @max_rows
    FOR UPDATE SKIP LOCKED
), marked AS (
    UPDATE deliveries SET enqueued_at = @now
    FROM due WHERE deliveries.id = due.id
    RETURNING deliveries.id, deliveries.next_attempt_at
)
SELECT marked.id FROM marked ORDER BY marked.next_attempt_at, marked.id;
