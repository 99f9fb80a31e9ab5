-- A delivery's references to its event and subscription are kept by the
-- statements that insert deliveries, not by foreign keys.
--
-- A foreign key checks each inserted row on its own: a trigger runs a
-- query per row that finds and key-share-locks the referenced row. Of
-- storing one event's 50 deliveries, those checks were about a third of
-- the statement's time (BenchmarkCreateDeliveries: 34,000 → 46,000
-- deliveries/s without them), and every fresh delivery paid them twice.
--
-- What they guaranteed holds by construction:
--
-- - The event exists: FanOut inserts deliveries only for events it has just
--   locked and marked fanned out in the same statement, and
--   InsertEventsFannedOut only for events it inserts in the same statement.
--   Events are never deleted.
-- - The subscription exists: both statements key-share-lock the batch's
--   subscriptions once each and insert no delivery to one that is gone
--   (FanOut leaves such a delivery out; InsertEventsFannedOut stores
--   nothing and its caller matches the batch again). Deleting a
--   subscription locks its row for update first (LockSubscription), so it
--   waits for inserts that hold the key-share lock and then deletes their
--   deliveries too, and inserts that come after it find the row gone: the
--   protocol the foreign key's own lock kept.
-- - Deleting a subscription deletes its deliveries itself
--   (DeleteSubscription), and their attempts still cascade.

-- +goose Up
ALTER TABLE deliveries DROP CONSTRAINT deliveries_event_id_fkey;
ALTER TABLE deliveries DROP CONSTRAINT deliveries_subscription_id_fkey;

-- +goose Down
DELETE FROM deliveries d
    WHERE NOT EXISTS (SELECT 1 FROM subscriptions s WHERE s.id = d.subscription_id)
       OR NOT EXISTS (SELECT 1 FROM events e WHERE e.id = d.event_id);
ALTER TABLE deliveries ADD CONSTRAINT deliveries_event_id_fkey
    FOREIGN KEY (event_id) REFERENCES events (id) ON DELETE CASCADE;
ALTER TABLE deliveries ADD CONSTRAINT deliveries_subscription_id_fkey
    FOREIGN KEY (subscription_id) REFERENCES subscriptions (id) ON DELETE CASCADE;
