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
