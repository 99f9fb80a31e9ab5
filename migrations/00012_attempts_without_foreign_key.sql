-- An attempt's reference to its delivery is kept by the statements that
-- insert and delete attempts, not by a foreign key (as the deliveries'
-- references since migration 00011).
--
-- The foreign key checked each attempt on its own: a trigger ran a query
-- per inserted row that found and key-share-locked the delivery the same
-- statement had just updated. RecordAttempts, the heaviest statement of a
-- delivery, spent about a fifth of its time there
-- (BenchmarkRecordAttempts).
--
-- What it guaranteed holds by construction:
--
-- - The delivery exists: RecordAttempts inserts an attempt only for a
--   delivery row it updates in the same statement, and so holds locked.
-- - Deleting a subscription deletes its deliveries' attempts itself
--   (DeleteSubscription). It first locks the deliveries for update, so a
--   record in flight commits before the attempts are deleted, and a later
--   one finds its delivery gone and stores nothing. Deliveries are deleted
--   nowhere else.

-- +goose Up
ALTER TABLE attempts DROP CONSTRAINT attempts_delivery_id_fkey;

-- +goose Down
DELETE FROM attempts a
    WHERE NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.id = a.delivery_id);
ALTER TABLE attempts ADD CONSTRAINT attempts_delivery_id_fkey
    FOREIGN KEY (delivery_id) REFERENCES deliveries (id) ON DELETE CASCADE;
