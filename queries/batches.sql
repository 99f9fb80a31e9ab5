-- name: RecoverDeliveriesBatch :one
-- One batch of a subscription's recovery: RetryDelivery for up to
-- @max_rows dead deliveries that died at or after @since, with id above
-- @after, in id order. candidates reads the batch from the statement's
-- snapshot, so scanned and last_id say how far it went even when some of
-- its rows are retried meanwhile; locked takes their locks in id order, so
-- concurrent recoveries cannot deadlock, and the update re-checks the
-- status, so a delivery retried meanwhile is skipped. subscription_found
-- tells an unknown subscription from one with nothing to recover.
WITH candidates AS (
    SELECT d.id FROM deliveries d
    WHERE d.subscription_id = @subscription_id
      AND d.status = 'dead'
      AND d.updated_at >= @since
      AND d.id > @after
    ORDER BY d.id
    LIMIT @max_rows
), locked AS (
    SELECT deliveries.id FROM deliveries
    WHERE deliveries.id IN (SELECT candidates.id FROM candidates)
    ORDER BY deliveries.id
    FOR UPDATE
), recovered AS (
    UPDATE deliveries SET
        status = 'retrying',
        next_attempt_at = @now,
        reason = '',
        enqueued_at = NULL,
        updated_at = @now
    FROM locked
    WHERE deliveries.id = locked.id AND deliveries.status = 'dead'
    RETURNING deliveries.id
)
SELECT
    EXISTS (SELECT 1 FROM subscriptions
            WHERE subscriptions.id = @subscription_id AND subscriptions.deleted_at IS NULL) AS subscription_found,
    (SELECT count(*) FROM candidates)::int AS scanned,
    COALESCE((SELECT max(candidates.id) FROM candidates), '')::text AS last_id,
    ARRAY(SELECT recovered.id FROM recovered ORDER BY recovered.id)::text[] AS ids;

-- name: SubscriptionDeletionMarked :one
-- Whether the subscription is being deleted (migration 00015); no row when
-- it does not exist.
SELECT (deleted_at IS NOT NULL)::boolean AS marked FROM subscriptions WHERE id = @id;

-- name: MarkSubscriptionDeleted :exec
-- The first step of a deletion: from now on every read treats the
-- subscription as gone, and it is inactive, so fan-out leaves it out (the
-- statement bumps the change counter, migration 00005, which tells every
-- copy of the active subscriptions) and a claim of one of its deliveries
-- settles it without a request.
UPDATE subscriptions SET deleted_at = now(), active = false, updated_at = now()
WHERE id = @id AND deleted_at IS NULL;

-- name: LockDeliveriesToDelete :many
-- One batch of a deletion: locks up to @max_rows of the subscription's
-- deliveries, in id order, until the transaction ends. A record of an
-- attempt holds its delivery's row lock until it commits, so once these
-- are held every attempt stored for them is committed, and the next
-- statement, DeleteDeliveries, sees it; a record that comes later waits,
-- then finds its delivery gone and stores nothing (migration 00012).
SELECT deliveries.id FROM deliveries
WHERE deliveries.subscription_id = @subscription_id
ORDER BY deliveries.id
LIMIT @max_rows
FOR UPDATE;

-- name: DeleteDeliveries :execrows
-- Deletes the deliveries LockDeliveriesToDelete locked, with their
-- attempts. Their events need nothing: an event's status is derived from
-- the deliveries left (migration 00004).
WITH attempts_removed AS (
    DELETE FROM attempts WHERE attempts.delivery_id = ANY(@ids::text[])
)
DELETE FROM deliveries WHERE deliveries.id = ANY(@ids::text[]);

-- name: UnfinishedDeletions :many
-- The subscriptions whose deletion is under way, longest first, for the
-- scheduler to finish those a crash interrupted (subscriptions_deleting_idx,
-- migration 00015).
SELECT id FROM subscriptions
WHERE deleted_at IS NOT NULL
ORDER BY deleted_at, id
LIMIT @max_rows;
