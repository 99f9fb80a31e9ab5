-- name: FanOut :many
-- Records the fan-out of a batch of events in one statement, so one round
-- trip and one commit whatever the batch size:
--
-- 1. claimed: marks the listed events that are not fanned out yet (one
--    with no deliveries is then delivered: nothing to do). Rows are locked in
--    id order, so concurrent fan-outs of overlapping batches cannot
--    deadlock; the later one re-checks fanned_out_at on the committed row
--    and skips the event, which makes fan-out idempotent.
-- 2. inserted: stores the deliveries of the claimed events only, as one
--    multi-row insert (set-returning functions in the select list are
--    zipped row by row). New deliveries count as enqueued at creation: the
--    caller appends them to the queue right after the commit.
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
-- or delivering with an expired lease), leases it for its subscription's
-- timeout plus @lease_margin, and returns it with its event and subscription
-- in one round trip.
--
-- An ordered delivery must also be first in line (SPEC §3): no delivery of
-- its subscription and key for an earlier event is pending, retrying or
-- delivering (one probe of deliveries_ordering_idx), and no earlier event
-- awaits fan-out, since its deliveries may not exist yet (a scan of
-- events_unfanned_idx, which is tiny in steady state). The OR tests the key
-- first, so an unordered delivery never runs the subqueries: its plan and
-- cost are those of the plain claim. HoldDelivery and DueDeliveries repeat
-- the predicate, NextInLine its second half; keep them alike.
--
-- Under READ COMMITTED the subqueries read the statement's snapshot, which
-- errs only towards holding: an earlier delivery can only have become
-- terminal since, and fan-out marks an event and inserts its deliveries in
-- one statement, so an earlier event is seen either unfanned or with its
-- deliveries.
WITH claimed AS (
    UPDATE deliveries SET
        status = 'delivering',
        next_attempt_at = (sqlc.arg(now)::timestamptz + subscriptions.timeout + sqlc.arg(lease_margin)::interval),
        updated_at = @now
    FROM subscriptions
    WHERE deliveries.id = @id
      AND subscriptions.id = deliveries.subscription_id
      AND deliveries.status IN ('pending', 'retrying', 'delivering')
      AND deliveries.next_attempt_at <= @now
      AND (deliveries.ordering_key = '' OR (
          NOT EXISTS (
              SELECT 1 FROM deliveries earlier
              WHERE earlier.subscription_id = deliveries.subscription_id
                AND earlier.ordering_key = deliveries.ordering_key
                AND earlier.ordering_key <> ''
                AND earlier.status IN ('pending', 'retrying', 'delivering')
                AND earlier.event_id < deliveries.event_id
          )
          AND NOT EXISTS (
              SELECT 1 FROM events unfanned
              WHERE unfanned.fanned_out_at IS NULL
                AND unfanned.id < deliveries.event_id
          )
      ))
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

-- name: HoldDelivery :one
-- ClaimDelivery's second statement, run only when the claim took nothing.
-- found tells a delivery that does not exist from one that cannot be
-- claimed; held says the only obstacle was ordering: the delivery is due
-- and not terminal but not first in line (ClaimDelivery's predicate,
-- negated). A held delivery's enqueued mark is cleared: DueDeliveries
-- leaves it out while it is held, and its first scan after that enqueues
-- it.
WITH held AS (
    UPDATE deliveries SET enqueued_at = NULL
    WHERE deliveries.id = @id
      AND deliveries.status IN ('pending', 'retrying', 'delivering')
      AND deliveries.next_attempt_at <= @now
      AND deliveries.ordering_key <> ''
      AND (
          EXISTS (
              SELECT 1 FROM deliveries earlier
              WHERE earlier.subscription_id = deliveries.subscription_id
                AND earlier.ordering_key = deliveries.ordering_key
                AND earlier.ordering_key <> ''
                AND earlier.status IN ('pending', 'retrying', 'delivering')
                AND earlier.event_id < deliveries.event_id
          )
          OR EXISTS (
              SELECT 1 FROM events unfanned
              WHERE unfanned.fanned_out_at IS NULL
                AND unfanned.id < deliveries.event_id
          )
      )
    RETURNING deliveries.id
)
SELECT
    EXISTS (SELECT 1 FROM deliveries WHERE deliveries.id = @id) AS found,
    EXISTS (SELECT 1 FROM held) AS held;

-- name: RecordAttempt :one
-- Stores the delivery's new state and its attempt in one statement. The
-- enqueued mark is cleared so the scheduler's scan picks a retrying delivery
-- up as soon as it is due. It returns the stored subscription and ordering
-- key, for NextInLine. Returns no row when the delivery does not exist.
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
    RETURNING deliveries.id, deliveries.event_id, deliveries.subscription_id, deliveries.ordering_key
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
)
SELECT updated.event_id, updated.subscription_id, updated.ordering_key
FROM updated
JOIN inserted ON inserted.delivery_id = updated.id;

-- name: NextInLine :many
-- Run after an ordered delivery became terminal, in the transaction that
-- stored it: the next delivery of its subscription and key, the one with
-- the smallest event id among those not terminal (the first entry of
-- deliveries_ordering_idx for the pair, so nothing not terminal precedes
-- it), provided it is first in line now, that is, no earlier event awaits
-- fan-out (see ClaimDelivery). At most one row.
SELECT nxt.id FROM (
    SELECT d.id, d.event_id FROM deliveries d
    WHERE d.subscription_id = @subscription_id
      AND d.ordering_key = @ordering_key
      AND d.ordering_key <> ''
      AND d.status IN ('pending', 'retrying', 'delivering')
    ORDER BY d.event_id
    LIMIT 1
) nxt
WHERE NOT EXISTS (
    SELECT 1 FROM events unfanned
    WHERE unfanned.fanned_out_at IS NULL
      AND unfanned.id < nxt.event_id
);

-- name: ReleaseDelivery :one
-- A claimed delivery's new state without an attempt (a postponement, or a
-- settlement that needs no request). Like RecordAttempt, it clears the
-- enqueued mark and returns the stored subscription and ordering key.
-- Returns no row when the delivery does not exist.
WITH updated AS (
    UPDATE deliveries SET
        status = @status,
        next_attempt_at = @next_attempt_at,
        reason = @reason,
        last_error = @last_error,
        enqueued_at = NULL,
        updated_at = @updated_at
    WHERE deliveries.id = @id
    RETURNING deliveries.event_id, deliveries.subscription_id, deliveries.ordering_key
)
SELECT updated.event_id, updated.subscription_id, updated.ordering_key
FROM updated;

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
    RETURNING deliveries.*
)
SELECT
    retried.id, retried.event_id, retried.subscription_id, retried.status,
    retried.attempts, retried.next_attempt_at, retried.last_status_code,
    retried.last_error, retried.reason, retried.ordering_key,
    retried.created_at, retried.updated_at
FROM retried;

-- name: RecoverDeliveries :one
-- RetryDelivery for every dead delivery of a subscription that died at or
-- after @since, in one statement. Deliveries are locked in id order, so
-- concurrent recoveries cannot deadlock; a delivery retried
-- meanwhile fails the re-checked status and is skipped.
-- subscription_found tells an unknown subscription from one with nothing
-- to recover.
WITH recovered AS (
    UPDATE deliveries SET
        status = 'retrying',
        next_attempt_at = @now,
        reason = '',
        enqueued_at = NULL,
        updated_at = @now
    WHERE deliveries.id IN (
        SELECT d.id FROM deliveries d
        WHERE d.subscription_id = @subscription_id
          AND d.status = 'dead'
          AND d.updated_at >= @since
        ORDER BY d.id
        FOR UPDATE
    )
    AND deliveries.status = 'dead'
    RETURNING deliveries.id
)
SELECT
    EXISTS (SELECT 1 FROM subscriptions WHERE subscriptions.id = @subscription_id) AS subscription_found,
    ARRAY(SELECT recovered.id FROM recovered ORDER BY recovered.id)::text[] AS ids;

-- name: GetDelivery :one
SELECT * FROM deliveries WHERE id = @id;

-- name: EventDeliveries :many
SELECT * FROM deliveries WHERE event_id = @event_id ORDER BY id;

-- name: ListDeliveries :many
-- One page of deliveries in id order; a NULL filter matches everything.
-- PostgreSQL folds the NULL tests away when it plans with the values, so
-- each combination of filters gets the index that fits it (see migration
-- 00002). The store runs this query unprepared so that it always is planned
-- with the values: a cached generic plan would keep the ORs and could not.
SELECT * FROM deliveries
WHERE id > @after
  AND (sqlc.narg(subscription_id)::text IS NULL OR subscription_id = sqlc.narg(subscription_id)::text)
  AND (sqlc.narg(event_id)::text IS NULL OR event_id = sqlc.narg(event_id)::text)
  AND (sqlc.narg(status)::text IS NULL OR status = sqlc.narg(status)::text)
ORDER BY id
LIMIT @max_rows;

-- name: DeliveryAttempts :many
SELECT * FROM attempts WHERE delivery_id = @delivery_id ORDER BY attempt;

-- name: EventAttempts :many
SELECT a.* FROM attempts a
JOIN deliveries d ON d.id = a.delivery_id
WHERE d.event_id = @event_id
ORDER BY a.delivery_id, a.attempt;

-- name: DueDeliveries :many
-- The scheduler's scan: due, non-terminal deliveries not enqueued since
-- @enqueued_before, oldest first, leaving out ordered ones that are not
-- first in line (ClaimDelivery's predicate; unordered rows skip its
-- subqueries), which a worker would only hold again. SKIP LOCKED lets scans
-- run in parallel, and a row another scan marked meanwhile fails the
-- re-checked condition, so no delivery is returned twice.
WITH due AS (
    SELECT d.id FROM deliveries d
    WHERE d.status IN ('pending', 'retrying', 'delivering')
      AND d.next_attempt_at <= @now
      AND (d.enqueued_at IS NULL OR d.enqueued_at <= @enqueued_before::timestamptz)
      AND (d.ordering_key = '' OR (
          NOT EXISTS (
              SELECT 1 FROM deliveries earlier
              WHERE earlier.subscription_id = d.subscription_id
                AND earlier.ordering_key = d.ordering_key
                AND earlier.ordering_key <> ''
                AND earlier.status IN ('pending', 'retrying', 'delivering')
                AND earlier.event_id < d.event_id
          )
          AND NOT EXISTS (
              SELECT 1 FROM events unfanned
              WHERE unfanned.fanned_out_at IS NULL
                AND unfanned.id < d.event_id
          )
      ))
    ORDER BY d.next_attempt_at, d.id
    LIMIT @max_rows
    FOR UPDATE SKIP LOCKED
), marked AS (
    UPDATE deliveries SET enqueued_at = @now
    FROM due WHERE deliveries.id = due.id
    RETURNING deliveries.id, deliveries.next_attempt_at
)
SELECT marked.id FROM marked ORDER BY marked.next_attempt_at, marked.id;
