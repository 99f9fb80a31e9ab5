-- Identifiers and keys compare byte for byte (collation "C"). They are
-- opaque ASCII (ids sort by creation time as bytes, SPEC §4), so a
-- linguistic collation buys nothing for them, and under one every
-- comparison in their indexes goes through strcoll: on PostgreSQL 15 even
-- C.UTF-8 does (only "C" and "POSIX" take the memcmp path), which was
-- ~7 % of PostgreSQL's CPU in a fan-out run (perf: bttextcmp under
-- _bt_compare, on every index insert and probe of the hot path). Byte
-- order is also the order the in-memory store and the API's cursors use,
-- whatever the database's default collation.
--
-- Equality, the only comparison most queries make, is unchanged for the
-- deterministic collations PostgreSQL databases use. Parameters and
-- literals compared with these columns take the column's collation.
-- Changing a column's collation rebuilds the indexes on it; the view that
-- selects events' columns must be dropped around it and made again.

-- +goose Up
DROP VIEW event_states;

ALTER TABLE subscriptions ALTER COLUMN id TYPE text COLLATE "C";
ALTER TABLE events
    ALTER COLUMN id TYPE text COLLATE "C",
    ALTER COLUMN idempotency_key TYPE text COLLATE "C";
ALTER TABLE deliveries
    ALTER COLUMN id TYPE text COLLATE "C",
    ALTER COLUMN event_id TYPE text COLLATE "C",
    ALTER COLUMN subscription_id TYPE text COLLATE "C",
    ALTER COLUMN ordering_key TYPE text COLLATE "C";
ALTER TABLE attempts
    ALTER COLUMN delivery_id TYPE text COLLATE "C",
    ALTER COLUMN subscription_id TYPE text COLLATE "C";

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

ALTER TABLE attempts
    ALTER COLUMN delivery_id TYPE text COLLATE "default",
    ALTER COLUMN subscription_id TYPE text COLLATE "default";
ALTER TABLE deliveries
    ALTER COLUMN id TYPE text COLLATE "default",
    ALTER COLUMN event_id TYPE text COLLATE "default",
    ALTER COLUMN subscription_id TYPE text COLLATE "default",
    ALTER COLUMN ordering_key TYPE text COLLATE "default";
ALTER TABLE events
    ALTER COLUMN id TYPE text COLLATE "default",
    ALTER COLUMN idempotency_key TYPE text COLLATE "default";
ALTER TABLE subscriptions ALTER COLUMN id TYPE text COLLATE "default";

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
