-- An event's status is derived from its deliveries when it is read, not
-- stored: pending until fanned out and while any delivery is pending,
-- retrying or delivering; then failed if any is dead, delivered otherwise.
--
-- Keeping it in the row cost every terminal delivery a lock on its event
-- and a rewrite of the whole event row (payload included): measured at a
-- third of PostgreSQL's time per delivery. Reading it costs two probes of
-- the (event_id, subscription_id) index, on reads only.

-- +goose Up
ALTER TABLE events DROP COLUMN status;

-- +goose Down
ALTER TABLE events ADD COLUMN status text NOT NULL DEFAULT 'pending'
    CHECK (status IN ('pending', 'delivered', 'failed'));
UPDATE events SET status = CASE
    WHEN fanned_out_at IS NULL THEN 'pending'
    WHEN EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = events.id
                 AND d.status IN ('pending', 'retrying', 'delivering')) THEN 'pending'
    WHEN EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = events.id
                 AND d.status = 'dead') THEN 'failed'
    ELSE 'delivered' END;
