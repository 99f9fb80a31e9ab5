-- A claim is a lease column, so that claiming a delivery is a HOT update.
--
-- A claim used to set status = 'delivering' and put the lease's end in
-- next_attempt_at. Both columns are indexed, so every claim wrote a new
-- entry into each of the six indexes that cover a pending delivery, and
-- the claim was a third of PostgreSQL's work per delivery. Now a claim
-- writes only lease_until and updated_at, which no index covers: with free
-- space on the row's page (fillfactor 70) PostgreSQL updates the row in
-- place of its page and touches no index (a heap-only tuple).
--
-- A delivery is delivering while it holds a lease: lease_until is set and
-- its stored status is still pending or retrying. Reads report it as
-- delivering, with the lease's end as its next attempt time, exactly as
-- before. Recording an outcome or releasing the delivery clears the lease;
-- an expired lease makes the delivery claimable, and due, again. Rows
-- stored as 'delivering' by the old claim keep working: their
-- next_attempt_at is their lease's end.

-- +goose Up
ALTER TABLE deliveries ADD COLUMN lease_until timestamptz;
ALTER TABLE deliveries SET (fillfactor = 70);

-- updated_at must stay out of every index for a claim, which sets it, to
-- be HOT. Recovering a subscription's dead letters since a time reads
-- deliveries_subscription_dead_id_idx (subscription_id, id) WHERE dead and
-- checks updated_at on the row: dead rows of one subscription, a rare
-- operator action.
DROP INDEX deliveries_subscription_dead_idx;

-- +goose Down
CREATE INDEX deliveries_subscription_dead_idx ON deliveries (subscription_id, updated_at)
    WHERE status = 'dead';
UPDATE deliveries SET status = 'delivering', next_attempt_at = lease_until
    WHERE lease_until IS NOT NULL AND status IN ('pending', 'retrying');
ALTER TABLE deliveries RESET (fillfactor);
ALTER TABLE deliveries DROP COLUMN lease_until;
