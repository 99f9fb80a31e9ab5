-- A subscription is deleted in bounded steps, each its own short
-- transaction (Store.DeleteSubscription): deleted_at marks it first, and
-- from then on every read treats it as gone and it is inactive, so nothing
-- new is fanned out to it and a claim of one of its deliveries settles it
-- without a request; its deliveries and their attempts are then deleted a
-- batch at a time, and the row last. A deletion interrupted midway leaves
-- the mark, and deleting the subscription again, or the scheduler
-- (UnfinishedDeletions, on the partial index: the scan costs the
-- deletions under way, not the subscriptions), finishes it.

-- +goose Up
ALTER TABLE subscriptions ADD COLUMN deleted_at timestamptz;
CREATE INDEX subscriptions_deleting_idx ON subscriptions (deleted_at, id)
    WHERE deleted_at IS NOT NULL;

-- +goose Down
-- Finishes the deletions under way: without the mark their subscriptions
-- would come back.
DELETE FROM attempts USING deliveries, subscriptions
    WHERE attempts.delivery_id = deliveries.id
      AND deliveries.subscription_id = subscriptions.id
      AND subscriptions.deleted_at IS NOT NULL;
DELETE FROM deliveries USING subscriptions
    WHERE deliveries.subscription_id = subscriptions.id
      AND subscriptions.deleted_at IS NOT NULL;
DELETE FROM subscriptions WHERE deleted_at IS NOT NULL;
DROP INDEX subscriptions_deleting_idx;
ALTER TABLE subscriptions DROP COLUMN deleted_at;
