-- name: CreateSubscription :exec
INSERT INTO subscriptions (
    id, url, event_types, description, secret, previous_secret,
    previous_secret_expires_at, active, disabled_reason, rate_limit,
    max_in_flight, timeout, retry_policy, ordering_key, headers,
    created_at, updated_at
) VALUES (
    @id, @url, @event_types, @description, @secret, @previous_secret,
    @previous_secret_expires_at, @active, @disabled_reason, @rate_limit,
    @max_in_flight, @timeout, @retry_policy, @ordering_key, @headers,
    @created_at, @updated_at
);

-- name: GetSubscription :one
-- A subscription being deleted (migration 00015) reads as gone.
SELECT * FROM subscriptions WHERE id = @id AND deleted_at IS NULL;

-- name: GetSubscriptionForUpdate :one
-- Locks the row until the transaction ends, so concurrent updates of one
-- subscription apply one after the other. One being deleted is gone (the
-- condition is re-checked once the lock is held).
SELECT * FROM subscriptions WHERE id = @id AND deleted_at IS NULL FOR UPDATE;

-- name: ListSubscriptions :many
SELECT * FROM subscriptions
WHERE id > @after AND deleted_at IS NULL
ORDER BY id
LIMIT @max_rows;

-- name: ActiveSubscriptions :many
SELECT * FROM subscriptions WHERE active ORDER BY id;

-- name: UpdateSubscription :exec
UPDATE subscriptions SET
    url = @url,
    event_types = @event_types,
    description = @description,
    secret = @secret,
    previous_secret = @previous_secret,
    previous_secret_expires_at = @previous_secret_expires_at,
    active = @active,
    disabled_reason = @disabled_reason,
    rate_limit = @rate_limit,
    max_in_flight = @max_in_flight,
    timeout = @timeout,
    retry_policy = @retry_policy,
    ordering_key = @ordering_key,
    headers = @headers,
    updated_at = @updated_at
WHERE id = @id;

-- name: LockSubscription :one
-- Locks the row until the transaction ends. The last step of deleting a
-- subscription takes this lock first: it waits for fan-outs that are
-- inserting deliveries to it (they hold a key-share lock on it, migration
-- 00011) and makes later ones find it gone, so the deletion sees every
-- delivery it removes.
SELECT id FROM subscriptions WHERE id = @id FOR UPDATE;

-- name: DeleteSubscription :exec
-- Removes the subscription, its deliveries and their attempts: the last
-- step of a deletion, once LockSubscription and LockDeliveriesToDelete
-- hold the row and the few deliveries left.
WITH attempts_removed AS (
    DELETE FROM attempts USING deliveries
    WHERE deliveries.subscription_id = @id AND attempts.delivery_id = deliveries.id
), deliveries_removed AS (
    DELETE FROM deliveries WHERE deliveries.subscription_id = @id
)
DELETE FROM subscriptions WHERE subscriptions.id = @id;

-- name: SealedColumnsForUpdate :many
-- The sealed columns of up to max_rows subscriptions after @after in id
-- order, locked until the transaction ends so that no update of theirs
-- is lost while Reencrypt rewrites them.
SELECT id, secret, previous_secret, headers FROM subscriptions
WHERE id > @after
ORDER BY id
LIMIT @max_rows
FOR UPDATE;

-- name: RewriteSealedColumns :exec
-- Stores subscriptions' sealed columns sealed again, in one statement;
-- nothing else of theirs changes (updated_at included: what they say is
-- the same).
UPDATE subscriptions SET
    secret = rewritten.secret,
    previous_secret = rewritten.previous_secret,
    headers = rewritten.headers
FROM (
    SELECT
        unnest(@ids::text[]) AS id,
        unnest(@secrets::text[]) AS secret,
        unnest(@previous_secrets::text[]) AS previous_secret,
        unnest(@headers::jsonb[]) AS headers
) AS rewritten
WHERE subscriptions.id = rewritten.id;

-- name: ActiveSubscriptionsPage :many
-- A page of the active subscriptions, in id order.
SELECT * FROM subscriptions
WHERE active AND id > @after
ORDER BY id
LIMIT @max_rows;

-- name: SubscriptionsChangedSince :many
-- A page of the subscriptions created or updated after change @since
-- (migration 00016), active or not, in the order of their changes, then
-- ids (the rows a statement writes share its number): the next page
-- starts after the last row's (@after_version, @after_id).
SELECT * FROM subscriptions
WHERE version > @since
    AND (version, id) > (@after_version::bigint, @after_id::text)
ORDER BY version, id
LIMIT @max_rows;

-- name: SubscriptionsDeletedSince :many
-- The ids of the subscriptions deleted after change @since (migration
-- 00016).
SELECT id FROM deleted_subscriptions WHERE version > @since;
