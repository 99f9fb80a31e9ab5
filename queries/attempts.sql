-- name: HoldDelivery :one
-- Store.ClaimDelivery's second statement, run only when the claim took
-- nothing. found tells a delivery that does not exist from one that cannot be
-- claimed; held says the only obstacle was ordering: the delivery is due
-- and not terminal but not first in line (first_in_line, migration
-- 00014). A held delivery's enqueued mark is cleared: DueDeliveries leaves
-- it out while it is held, and its first scan after that enqueues it.
WITH held AS (
    UPDATE deliveries SET enqueued_at = NULL
    WHERE deliveries.id = @id
      AND deliveries.status IN ('pending', 'retrying', 'delivering')
      AND deliveries.next_attempt_at <= @now
      AND (deliveries.lease_until IS NULL OR deliveries.lease_until <= @now)
      AND deliveries.ordering_key <> ''
      AND NOT first_in_line(deliveries.subscription_id, deliveries.ordering_key, deliveries.event_id)
    RETURNING deliveries.id
)
SELECT
    EXISTS (SELECT 1 FROM deliveries WHERE deliveries.id = @id) AS found,
    EXISTS (SELECT 1 FROM held) AS held;

-- name: NextInLine :many
-- Run after an ordered delivery became terminal, in the transaction that
-- stored it: the next delivery of its subscription and key, the one with
-- the smallest event id among those not terminal (the first entry of
-- deliveries_ordering_idx for the pair, so nothing not terminal precedes
-- it), provided it is first in line now (first_in_line, migration 00014:
-- no earlier event that could join its line awaits fan-out). At most one
-- row.
SELECT nxt.id FROM (
    SELECT d.id, d.event_id FROM deliveries d
    WHERE d.subscription_id = @subscription_id
      AND d.ordering_key = @ordering_key
      AND d.ordering_key <> ''
      AND d.status IN ('pending', 'retrying', 'delivering')
    ORDER BY d.event_id
    LIMIT 1
) nxt
WHERE first_in_line(@subscription_id, @ordering_key, nxt.event_id);

-- name: ClaimDeliveries :many
-- The worker's hot path: takes a due delivery (pending or retrying and due,
-- or delivering with an expired lease), leases it for its subscription's
-- timeout plus @lease_margin, and returns it with its event and subscription
-- in one round trip, for a batch of concurrent claims.
--
-- A reserved delivery (migration 00010) is not claimed while its
-- reservation lasts, except for the holder of its creator's queue entry,
-- whose row says @fresh. For that holder, while the reservation outlasts
-- an attempt (its end at least the subscription's timeout plus the margin
-- away, what a lease would be given), taken reads the delivery without a
-- write: the reservation is its lease. Otherwise (the entry waited long in
-- the queue) the holder claims it as anyone claims an unreserved one. A
-- batch that only takes writes nothing, so it costs a read, not a commit.
--
-- An ordered delivery must also be first in line (SPEC §3; first_in_line,
-- migration 00014, which HoldDelivery, DueDeliveries and NextInLine ask
-- too): no delivery of its subscription and key for an earlier event is
-- pending, retrying or delivering, and no earlier event that could join
-- its line awaits fan-out. The OR tests the key first, so an unordered
-- delivery never calls it: its plan and cost are those of the plain claim.
-- An ordered delivery is never taken, only claimed: taken does not check
-- its line.
--
-- Under READ COMMITTED first_in_line (STABLE) reads the statement's
-- snapshot, which errs only towards holding: an earlier delivery can only
-- have become terminal since, and fan-out marks an event and inserts its
-- deliveries in one statement, so an earlier event is seen either
-- unfanned or with its deliveries.
--
-- The group commit of concurrent claims (see Store.ClaimDelivery): row i
-- of the zipped arrays claims delivery @ids[i] at @nows[i] with lease
-- margin @lease_margins[i], for the holder of its creator's entry when
-- @fresh[i], and the claimed or taken rows come back with their event and
-- subscription, in no particular order (the caller matches them by id); a
-- claim on its own is a batch of one. An id must appear at most once: the
-- caller sends each once.
--
-- Rows are locked as the UPDATE reaches them, in the order of @ids (a
-- nested loop from the array over deliveries_pkey), which the caller sorts,
-- so that concurrent batches sharing rows (another worker's claims,
-- RecordAttempts, ReleaseDeliveries) lock them in one order. The
-- subscription's timeout is a scalar subquery, not a join, so that no join
-- order decides the locking order. Locking in id order explicitly first
-- (WHERE id IN (SELECT … ORDER BY id FOR UPDATE)) cost a second pass
-- over every row and a lock record per row, about a fifth of what a
-- claim and record manage together, and more on a busy machine;
-- should a plan ever lock out of order and two batches deadlock,
-- PostgreSQL aborts one and the caller writes it again. A row changed
-- meanwhile is re-checked against the predicate on its committed version,
-- as above.
WITH wanted AS (
    SELECT
        unnest(@ids::text[]) AS id,
        unnest(@nows::timestamptz[]) AS claimed_at,
        unnest(@lease_margins::interval[]) AS lease_margin,
        unnest(@fresh::boolean[]) AS fresh
), taken AS (
    SELECT deliveries.*
    FROM wanted
    JOIN deliveries ON deliveries.id = wanted.id
    WHERE wanted.fresh
      AND deliveries.lease_until IS NULL
      AND deliveries.ordering_key = ''
      AND deliveries.reserved_until >= wanted.claimed_at + (
          SELECT subscriptions.timeout FROM subscriptions
          WHERE subscriptions.id = deliveries.subscription_id
      ) + wanted.lease_margin
), claimed AS (
    UPDATE deliveries SET
        lease_until = wanted.claimed_at + (
            SELECT subscriptions.timeout FROM subscriptions
            WHERE subscriptions.id = deliveries.subscription_id
        ) + wanted.lease_margin,
        reserved_until = NULL,
        updated_at = wanted.claimed_at
    FROM wanted
    WHERE deliveries.id = wanted.id
      -- Not taken: taken's predicate, negated on the row itself (an
      -- anti-join with taken would compare every row of the batch with
      -- every other).
      AND NOT (
          wanted.fresh
          AND deliveries.lease_until IS NULL
          AND deliveries.ordering_key = ''
          AND deliveries.reserved_until IS NOT NULL
          AND deliveries.reserved_until >= wanted.claimed_at + (
              SELECT subscriptions.timeout FROM subscriptions
              WHERE subscriptions.id = deliveries.subscription_id
          ) + wanted.lease_margin
      )
      -- Not terminal, written so that it does not imply the predicate of
      -- deliveries_due_idx or deliveries_status_idx: on a BatchPool's
      -- sessions (see postgres.ConnectBatches), a full scan of a partial
      -- index the WHERE clause implies would be the cheapest plan while
      -- deliveries is small, and the cached plan would keep it.
      AND deliveries.status NOT IN ('delivered', 'dead')
      AND deliveries.next_attempt_at <= wanted.claimed_at
      AND (deliveries.lease_until IS NULL OR deliveries.lease_until <= wanted.claimed_at)
      AND (deliveries.reserved_until IS NULL OR deliveries.reserved_until <= wanted.claimed_at OR wanted.fresh)
      AND (deliveries.ordering_key = '' OR first_in_line(deliveries.subscription_id, deliveries.ordering_key, deliveries.event_id))
    RETURNING deliveries.*
), got AS (
    SELECT * FROM taken
    UNION ALL
    SELECT * FROM claimed
)
SELECT
    got.id, got.event_id, got.subscription_id, got.status,
    got.attempts, got.next_attempt_at, got.last_status_code,
    got.last_error, got.reason, got.ordering_key,
    got.created_at, got.updated_at, got.lease_until,
    sqlc.embed(events), sqlc.embed(subscriptions)
FROM got
JOIN events ON events.id = got.event_id
JOIN subscriptions ON subscriptions.id = got.subscription_id;

-- name: RecordAttempts :many
-- Stores deliveries' new states and their attempts in one statement: the
-- group commit of concurrent outcomes (see Store.RecordAttempt), an outcome
-- on its own being a batch of one. The lease, the reservation (migration
-- 00010) and the enqueued mark are cleared, so the scheduler's scan picks a
-- retrying delivery up as soon as it is due. Row i of the zipped arrays is
-- one delivery's new state and its attempt; a status code of 0 stores NULL
-- (no response). It
-- returns, per delivery stored, its id and stored event, subscription and
-- ordering key; a delivery that does not exist is not returned. An id must
-- appear at most once: the caller sends each once, in id order, which is
-- the order rows are locked in (see ClaimDeliveries). The statement writes
-- every row or none: an attempt that exists already (a fenced worker)
-- fails it all.
WITH outcome AS (
    SELECT
        unnest(@ids::text[]) AS id,
        unnest(@statuses::text[]) AS status,
        unnest(@attempts::integer[]) AS attempts,
        unnest(@next_attempt_ats::timestamptz[]) AS next_attempt_at,
        unnest(@last_status_codes::integer[]) AS last_status_code,
        unnest(@last_errors::text[]) AS last_error,
        unnest(@reasons::text[]) AS reason,
        unnest(@updated_ats::timestamptz[]) AS updated_at,
        unnest(@attempt_numbers::integer[]) AS attempt,
        unnest(@status_codes::integer[]) AS status_code,
        unnest(@response_bodies::bytea[]) AS response_body,
        unnest(@errors::text[]) AS error,
        unnest(@durations::interval[]) AS duration,
        unnest(@attempt_created_ats::timestamptz[]) AS attempt_created_at
), updated AS (
    UPDATE deliveries SET
        status = outcome.status,
        attempts = outcome.attempts,
        next_attempt_at = outcome.next_attempt_at,
        lease_until = NULL,
        reserved_until = NULL,
        last_status_code = NULLIF(outcome.last_status_code, 0),
        last_error = outcome.last_error,
        reason = outcome.reason,
        enqueued_at = NULL,
        updated_at = outcome.updated_at
    FROM outcome
    WHERE deliveries.id = outcome.id
    RETURNING deliveries.id, deliveries.event_id, deliveries.subscription_id,
        deliveries.ordering_key, outcome.attempt, outcome.status_code,
        outcome.response_body, outcome.error, outcome.duration,
        outcome.attempt_created_at
), inserted AS (
    -- The attempt comes along in updated's rows: joining updated to
    -- outcome again would compare every row with every other (a nested
    -- loop of two CTE scans, as the batch pool plans it), a cost that grew
    -- with the square of the batch.
    INSERT INTO attempts (
        delivery_id, subscription_id, attempt, status_code, response_body,
        error, duration, created_at
    )
    SELECT
        updated.id, updated.subscription_id, updated.attempt,
        NULLIF(updated.status_code, 0), updated.response_body, updated.error,
        updated.duration, updated.attempt_created_at
    FROM updated
)
-- inserted runs to completion though nothing reads it, as every
-- data-modifying WITH query does, and inserts a row per updated row or
-- fails the statement.
SELECT updated.id, updated.event_id, updated.subscription_id, updated.ordering_key
FROM updated;

-- name: ReleaseDeliveries :many
-- Claimed deliveries' new states without an attempt (a postponement, or a
-- settlement that needs no request): the group commit of concurrent
-- releases (see Store.ReleaseDelivery), as RecordAttempts without the
-- attempts.
WITH released AS (
    SELECT
        unnest(@ids::text[]) AS id,
        unnest(@statuses::text[]) AS status,
        unnest(@next_attempt_ats::timestamptz[]) AS next_attempt_at,
        unnest(@reasons::text[]) AS reason,
        unnest(@last_errors::text[]) AS last_error,
        unnest(@updated_ats::timestamptz[]) AS updated_at
)
UPDATE deliveries SET
    status = released.status,
    next_attempt_at = released.next_attempt_at,
    lease_until = NULL,
    reserved_until = NULL,
    reason = released.reason,
    last_error = released.last_error,
    enqueued_at = NULL,
    updated_at = released.updated_at
FROM released
WHERE deliveries.id = released.id
RETURNING deliveries.id, deliveries.event_id, deliveries.subscription_id, deliveries.ordering_key;
