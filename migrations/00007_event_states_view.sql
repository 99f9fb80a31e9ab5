-- event_states is events with each event's status derived from its
-- deliveries (migration 00004), written once for every query that reads
-- an event: pending until fanned out and while a delivery is pending,
-- retrying or delivering (also while leased: its stored status stays
-- pending or retrying), then failed if one is dead, delivered otherwise
-- (also when it has none). A plain view: PostgreSQL folds it into each
-- query, and an unfanned event, what fan-out loads, is pending without a
-- probe of deliveries. e.* is expanded when the view is made: a migration
-- that adds a column to events makes the view again.

-- +goose Up
CREATE VIEW event_states AS
SELECT
    e.*,
    (CASE
        WHEN e.fanned_out_at IS NULL THEN 'pending'
        WHEN EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = e.id
                     AND d.status IN ('pending', 'retrying', 'delivering')) THEN 'pending'
        WHEN EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = e.id
                     AND d.status = 'dead') THEN 'failed'
        ELSE 'delivered'
    END)::text AS status
FROM events e;

-- +goose Down
DROP VIEW event_states;
