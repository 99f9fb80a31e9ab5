-- name: InsertKeyedEvent :execrows
-- Stores an event with an idempotency key, claiming the key, in one
-- statement: a new key, or one whose owner was stored at or before
-- @kept_since (its window ended), becomes the event's, and the event is
-- stored; a key owned within the window stores nothing (0 rows), and
-- IdempotencyKeyOwner tells the owner. Two calls with one key serialize on
-- its row: the second sees the first's claim once it commits. A duplicate
-- id is a unique violation, which undoes the claim too.
WITH claimed AS (
    INSERT INTO idempotency_keys (key, event_id, created_at)
    VALUES (@idempotency_key::text, @id::text, @created_at::timestamptz)
    ON CONFLICT (key) DO UPDATE
        SET event_id = EXCLUDED.event_id, created_at = EXCLUDED.created_at
        WHERE idempotency_keys.created_at <= @kept_since::timestamptz
    RETURNING event_id
)
INSERT INTO events (
    id, type, source, data, ordering_key, idempotency_key, created_at
)
SELECT @id::text, @type::text, @source::text, @data::bytea, @ordering_key::text, @idempotency_key::text, @created_at::timestamptz
FROM claimed;

-- name: InsertEvents :execrows
-- Stores a batch of events without idempotency keys in one statement, so
-- one round trip and one commit for the whole batch (the group commit of
-- Store.CreateEvent). The arrays are zipped row by row. Like InsertEvent, a
-- duplicate id is a unique violation; it fails the whole statement.
INSERT INTO events (
    id, type, source, data, ordering_key, created_at
)
SELECT
    unnest(@ids::text[]),
    unnest(@types::text[]),
    unnest(@sources::text[]),
    unnest(@data::bytea[]),
    unnest(@ordering_keys::text[]),
    unnest(@created_ats::timestamptz[]);

-- name: IdempotencyKeyOwner :one
-- The event that owns the key, with its status (the event_states view).
SELECT e.* FROM idempotency_keys k
JOIN event_states e ON e.id = k.event_id
WHERE k.key = @idempotency_key::text;

-- name: ExpireIdempotencyKeys :execrows
-- Deletes up to @max_rows keys owned since @kept_since or before, oldest
-- first (idempotency_keys_created_idx, migration 00017), skipping rows
-- another caller holds, so concurrent sweeps never wait on each other.
DELETE FROM idempotency_keys
WHERE key IN (
    SELECT k.key FROM idempotency_keys k
    WHERE k.created_at <= @kept_since::timestamptz
    ORDER BY k.created_at
    LIMIT @max_rows::integer
    FOR UPDATE SKIP LOCKED
);

-- name: GetEvent :one
-- The event with its status, derived from its deliveries (the event_states
-- view, migration 00007).
SELECT * FROM event_states WHERE id = @id;

-- name: GetEvents :many
-- Events with their status (the event_states view; an unfanned one, what
-- fan-out loads, is pending without a probe).
SELECT * FROM event_states WHERE id = ANY(@ids::text[]);

-- name: UnfannedEvents :many
-- The outbox sweep: unfanned events neither created nor picked by an
-- earlier sweep after @picked_before, oldest first, marked picked at @now.
-- The creation time bounds the scan of events_unfanned_idx; the last pick,
-- COALESCE(enqueued_at, created_at), is its third column, checked in the
-- index. SKIP LOCKED lets sweeps run in parallel, and a row another sweep
-- marked meanwhile fails the re-checked condition, so no event is returned
-- twice.
WITH picked AS (
    SELECT e.id FROM events e
    WHERE e.fanned_out_at IS NULL
      AND e.created_at <= @picked_before::timestamptz
      AND COALESCE(e.enqueued_at, e.created_at) <= @picked_before::timestamptz
    ORDER BY e.created_at, e.id
    LIMIT @max_rows
    FOR UPDATE SKIP LOCKED
), marked AS (
    UPDATE events SET enqueued_at = @now::timestamptz
    FROM picked WHERE events.id = picked.id
    RETURNING events.id, events.created_at
)
SELECT marked.id FROM marked ORDER BY marked.created_at, marked.id;

-- name: SubscriptionVersion :one
-- The change counter of subscriptions (migration 00005).
SELECT version FROM subscription_version WHERE only_row;

-- name: InsertEventsFannedOut :one
-- The group commit of events with inline fan-out: stores a batch of events
-- without idempotency keys, those flagged in @fanned already fanned out,
-- and the deliveries of those in one statement, so one round trip and one
-- commit for the whole batch. The arrays are zipped row by row, the
-- deliveries' separately from the events'. New deliveries count as
-- enqueued at creation: the caller appends them to the queue right after
-- the commit; a delivery given a reservation (@delivery_reserved_untils
-- after its creation) is stored reserved (migration 00010). A duplicate
-- id, or a delivery to a subscription deleted meanwhile, fails the whole
-- statement.
--
-- The deliveries' subscriptions are key-share-locked once each, standing
-- in for a foreign key (migration 00011); when one of them is gone (deleted
-- after the statement's snapshot was taken, which the version check below
-- cannot see), nothing is stored and missing_subscriptions says so: the
-- caller loads the subscriptions again and retries.
--
-- The fan-out was matched against a copy of the subscriptions taken at
-- subscription_version @subscription_version; when the counter has moved
-- since (the statement reads it in its own snapshot), nothing is stored,
-- and current_version tells the caller to load the subscriptions again and
-- retry. This check in the statement replaces a read of the counter before
-- it: a round trip per batch. A negative @subscription_version (a batch
-- with nothing fanned out inline) stores without the check.
--
-- The events' data go as one bytea, @data_blob, each cut out at its
-- @data_offsets (1-based) for its @data_lengths, not as a bytea[]: pgx
-- encodes an array element by element into a buffer that it grows a
-- quarter at a time and shrinks again after every statement, several
-- times each event's size in allocations for the garbage collector.
WITH current_version AS (
    SELECT version FROM subscription_version
), subscribed AS (
    SELECT subscriptions.id FROM subscriptions
    WHERE subscriptions.id = ANY(@subscription_ids::text[])
    ORDER BY subscriptions.id
    FOR KEY SHARE
), missing AS (
    SELECT (SELECT count(DISTINCT wanted.id) FROM unnest(@subscription_ids::text[]) AS wanted (id))
        - (SELECT count(*) FROM subscribed) AS n
), allowed AS (
    SELECT (@subscription_version::bigint < 0
        OR @subscription_version::bigint = (SELECT version FROM current_version))
        AND (SELECT n FROM missing) = 0 AS ok
), inserted AS (
    INSERT INTO events (
        id, type, source, data, ordering_key, fanned_out_at, created_at
    )
    SELECT
        u.id, u.type, u.source, substring(@data_blob::bytea FROM u.data_offset FOR u.data_length), u.ordering_key,
        CASE WHEN u.fanned THEN u.created_at END, u.created_at
    FROM (
        SELECT
            unnest(@ids::text[]) AS id,
            unnest(@types::text[]) AS type,
            unnest(@sources::text[]) AS source,
            unnest(@data_offsets::int[]) AS data_offset,
            unnest(@data_lengths::int[]) AS data_length,
            unnest(@ordering_keys::text[]) AS ordering_key,
            unnest(@fanned::boolean[]) AS fanned,
            unnest(@created_ats::timestamptz[]) AS created_at
    ) AS u
    WHERE (SELECT ok FROM allowed)
    RETURNING events.id
), fanned AS (
    INSERT INTO deliveries (
        id, event_id, subscription_id, status, attempts, next_attempt_at,
        ordering_key, created_at, updated_at, enqueued_at, reserved_until
    )
    SELECT
        d.id, d.event_id, d.subscription_id, 'pending', 0, d.created_at,
        d.ordering_key, d.created_at, d.created_at, d.created_at,
        CASE WHEN d.reserved_until > d.created_at THEN d.reserved_until END
    FROM (
        SELECT
            unnest(@delivery_ids::text[]) AS id,
            unnest(@delivery_event_ids::text[]) AS event_id,
            unnest(@subscription_ids::text[]) AS subscription_id,
            unnest(@delivery_ordering_keys::text[]) AS ordering_key,
            unnest(@delivery_created_ats::timestamptz[]) AS created_at,
            unnest(@delivery_reserved_untils::timestamptz[]) AS reserved_until
    ) AS d
    WHERE (SELECT ok FROM allowed)
)
SELECT
    (SELECT version FROM current_version)::bigint AS current_version,
    (SELECT n FROM missing)::bigint AS missing_subscriptions,
    (SELECT count(*) FROM inserted)::bigint AS stored;

-- name: EventsToTake :many
-- The events of a batch of fresh deliveries whose holders take them
-- without reading their rows (Store.TakeDelivery), with the change counter
-- of subscriptions (migration 00005), read in the same snapshot: a change
-- committed before the batch began moves it.
SELECT sqlc.embed(events), (SELECT version FROM subscription_version WHERE only_row)::bigint AS subscription_version
FROM events WHERE id = ANY(@ids::text[]);

-- name: FailFanOut :one
-- Counts a failed try to fan out an event not fanned out yet, and when it
-- makes @max_tries tries, settles the event: failed with @reason, fanned
-- out at @now with no deliveries (migration 00013). found tells an event
-- that does not exist; settled, whether this try settled it.
WITH counted AS (
    UPDATE events SET
        fanout_failures = events.fanout_failures + 1,
        failure_reason = CASE WHEN events.fanout_failures + 1 >= @max_tries::integer
            THEN @reason::text ELSE events.failure_reason END,
        fanned_out_at = CASE WHEN events.fanout_failures + 1 >= @max_tries::integer
            THEN @now::timestamptz END
    WHERE events.id = @id AND events.fanned_out_at IS NULL
    RETURNING events.fanned_out_at IS NOT NULL AS settled
)
SELECT
    EXISTS (SELECT 1 FROM events WHERE events.id = @id) AS found,
    COALESCE((SELECT counted.settled FROM counted), false)::boolean AS settled;
