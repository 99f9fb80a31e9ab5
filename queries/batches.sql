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
    EXISTS (SELECT 1 FROM subscriptions WHERE subscriptions.id = @subscription_id) AS subscription_found,
    (SELECT count(*) FROM candidates)::int AS scanned,
    COALESCE((SELECT max(candidates.id) FROM candidates), '')::text AS last_id,
    ARRAY(SELECT recovered.id FROM recovered ORDER BY recovered.id)::text[] AS ids;
