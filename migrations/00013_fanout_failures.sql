-- An event that cannot be fanned out is settled as failed after a few
-- tries, instead of being tried for ever (SPEC §2, Isolation).
--
-- fanout_failures counts failed tries, durably, so tries by any worker add
-- up; failure_reason is '' unless the event was settled failed, and then
-- says why. A settled event is fanned out (fanned_out_at set) with no
-- deliveries: it leaves events_unfanned_idx, so the outbox sweep never
-- picks it again and it holds no ordered delivery back. event_states reads
-- it as failed.

-- +goose Up
ALTER TABLE events
    ADD COLUMN fanout_failures integer NOT NULL DEFAULT 0,
    ADD COLUMN failure_reason text NOT NULL DEFAULT '';

DROP VIEW event_states;
CREATE VIEW event_states AS
SELECT
    e.*,
    (CASE
        WHEN e.fanned_out_at IS NULL THEN 'pending'
        WHEN e.failure_reason <> '' THEN 'failed'
        WHEN EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = e.id
                     AND d.status IN ('pending', 'retrying', 'delivering')) THEN 'pending'
        WHEN EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = e.id
                     AND d.status = 'dead') THEN 'failed'
        ELSE 'delivered'
    END)::text AS status
FROM events e;

-- +goose Down
DROP VIEW event_states;
ALTER TABLE events
    DROP COLUMN failure_reason,
    DROP COLUMN fanout_failures;
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
