-- name: FanOut :many
-- Records the fan-out of a batch of events in one statement, so one round
-- trip and one commit whatever the batch size:
--
-- 1. claimed: marks the listed events that are not fanned out yet (one
--    with no deliveries is then delivered: nothing to do). Rows are locked in
--    id order, so concurrent fan-outs of overlapping batches cannot
--    deadlock; the later one re-checks fanned_out_at on the committed row
--    and skips the event, which makes fan-out idempotent.
-- 2. subscribed: key-share-locks the batch's subscriptions, once each, in
--    id order, standing in for a foreign key (migration 00011): a
--    subscription being deleted is waited for, and one deleted is not
--    returned.
-- 3. inserted: stores the deliveries of the claimed events to subscribed
--    subscriptions only (one deleted since the caller matched it gets
--    none), as one
--    multi-row insert (set-returning functions in the select list are
--    zipped row by row). New deliveries count as enqueued at creation: the
--    caller appends them to the queue right after the commit. A delivery
--    given a reservation (@reserved_untils after its creation) is stored
--    reserved (migration 00010).
WITH claimed AS (
    UPDATE events SET fanned_out_at = now()
    WHERE events.id IN (
        SELECT e.id FROM events e
        WHERE e.id = ANY(@event_ids::text[]) AND e.fanned_out_at IS NULL
        ORDER BY e.id
        FOR UPDATE
    )
    AND events.fanned_out_at IS NULL
    RETURNING events.id
), subscribed AS (
    SELECT subscriptions.id FROM subscriptions
    WHERE subscriptions.id = ANY(@subscription_ids::text[])
    ORDER BY subscriptions.id
    FOR KEY SHARE
), inserted AS (
    INSERT INTO deliveries (
        id, event_id, subscription_id, status, attempts, next_attempt_at,
        ordering_key, created_at, updated_at, enqueued_at, reserved_until
    )
    SELECT
        u.id, u.event_id, u.subscription_id, u.status, u.attempts, u.next_attempt_at,
        u.ordering_key, u.created_at, u.updated_at, u.created_at,
        CASE WHEN u.reserved_until > u.created_at THEN u.reserved_until END
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
            unnest(@updated_ats::timestamptz[]) AS updated_at,
            unnest(@reserved_untils::timestamptz[]) AS reserved_until
    ) AS u
    WHERE u.event_id IN (SELECT claimed.id FROM claimed)
      AND u.subscription_id IN (SELECT subscribed.id FROM subscribed)
    RETURNING deliveries.id
)
SELECT inserted.id FROM inserted;

-- name: DeliveryExists :one
SELECT EXISTS (SELECT 1 FROM deliveries WHERE id = @id);

-- name: RetryDelivery :one
-- Makes a dead or retrying delivery due at @now (its event reads as pending
-- again). Returns no row when the delivery does not exist or is in another
-- state.
WITH retried AS (
    UPDATE deliveries SET
        status = 'retrying',
        next_attempt_at = @now,
        reason = '',
        enqueued_at = NULL,
        updated_at = @now
    WHERE deliveries.id = @id AND deliveries.status IN ('dead', 'retrying')
      AND deliveries.lease_until IS NULL -- a leased one is delivering
    RETURNING deliveries.*
)
SELECT
    retried.id, retried.event_id, retried.subscription_id, retried.status,
    retried.attempts, retried.next_attempt_at, retried.last_status_code,
    retried.last_error, retried.reason, retried.ordering_key,
    retried.created_at, retried.updated_at, retried.lease_until
FROM retried;

-- name: GetDelivery :one
SELECT * FROM deliveries WHERE id = @id;

-- name: ListDeliveries :many
-- One page of deliveries in id order; a NULL filter matches everything.
-- PostgreSQL folds the NULL tests away when it plans with the values, so
-- each combination of filters gets the index that fits it (see migration
-- 00002). The store runs this query unprepared so that it always is planned
-- with the values: a cached generic plan would keep the ORs and could not.
-- A delivery is delivering while it holds a lease (migration 00006): the
-- status filter folds to the stored status and the lease test.
SELECT * FROM deliveries
WHERE id > @after
  AND (sqlc.narg(subscription_id)::text IS NULL OR subscription_id = sqlc.narg(subscription_id)::text)
  AND (sqlc.narg(event_id)::text IS NULL OR event_id = sqlc.narg(event_id)::text)
  AND (sqlc.narg(status)::text IS NULL
       OR (sqlc.narg(status)::text = 'delivering'
           AND (status = 'delivering' OR (status IN ('pending', 'retrying') AND lease_until IS NOT NULL)))
       OR (sqlc.narg(status)::text IN ('pending', 'retrying')
           AND status = sqlc.narg(status)::text AND lease_until IS NULL)
       OR (sqlc.narg(status)::text NOT IN ('delivering', 'pending', 'retrying')
           AND status = sqlc.narg(status)::text))
ORDER BY id
LIMIT @max_rows;

-- name: DeliveryAttempts :many
SELECT * FROM attempts WHERE delivery_id = @delivery_id ORDER BY attempt;

-- name: DueDeliveries :many
-- The scheduler's scan: due, non-terminal deliveries neither leased nor
-- reserved (migration 00010) and not enqueued since @enqueued_before,
-- leaving out ordered ones that are not first in line (first_in_line,
-- migration 00014; unordered rows skip it), which a worker would only hold
-- again. SKIP LOCKED lets scans run in parallel, and
-- a row another scan marked meanwhile fails the re-checked condition, so no
-- delivery is returned twice.
--
-- Two scans, one per index (migration 00009), so that deliveries waiting in
-- the queue are never read: never_enqueued walks deliveries_due_idx (no
-- mark) in due order, lost walks deliveries_enqueued_idx from the oldest
-- mark up to @enqueued_before, and the first @max_rows of both by due time
-- are marked. A row the other scan's share left out stays locked until
-- the commit and unmarked, so the next scan finds it. Both ask
-- first_in_line: each must filter before its LIMIT, or rows held behind an
-- earlier one could fill it.
WITH never_enqueued AS (
    SELECT d.id, d.next_attempt_at FROM deliveries d
    WHERE d.enqueued_at IS NULL
      AND d.status IN ('pending', 'retrying', 'delivering')
      AND d.next_attempt_at <= @now
      AND (d.lease_until IS NULL OR d.lease_until <= @now)
      AND (d.reserved_until IS NULL OR d.reserved_until <= @now)
      AND (d.ordering_key = '' OR first_in_line(d.subscription_id, d.ordering_key, d.event_id))
    ORDER BY d.next_attempt_at, d.id
    LIMIT @max_rows::integer
    FOR UPDATE SKIP LOCKED
), lost AS (
    SELECT d.id, d.next_attempt_at FROM deliveries d
    WHERE d.enqueued_at IS NOT NULL
      AND d.enqueued_at <= @enqueued_before::timestamptz
      AND d.status IN ('pending', 'retrying', 'delivering')
      AND d.next_attempt_at <= @now
      AND (d.lease_until IS NULL OR d.lease_until <= @now)
      AND (d.reserved_until IS NULL OR d.reserved_until <= @now)
      AND (d.ordering_key = '' OR first_in_line(d.subscription_id, d.ordering_key, d.event_id))
    ORDER BY d.enqueued_at, d.id
    LIMIT @max_rows::integer
    FOR UPDATE SKIP LOCKED
), due AS (
    SELECT id, next_attempt_at FROM never_enqueued
    UNION ALL
    SELECT id, next_attempt_at FROM lost
    ORDER BY next_attempt_at, id
    LIMIT @max_rows::integer
), marked AS (
    UPDATE deliveries SET enqueued_at = @now
    FROM due WHERE deliveries.id = due.id
    RETURNING deliveries.id, deliveries.subscription_id, deliveries.next_attempt_at
)
SELECT marked.id, marked.subscription_id FROM marked ORDER BY marked.next_attempt_at, marked.id;
