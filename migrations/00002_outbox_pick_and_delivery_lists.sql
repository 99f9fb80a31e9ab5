-- The outbox sweep's pick mark, and the indexes GET /v1/deliveries needs.

-- +goose Up

-- When the outbox sweep last picked the event for re-enqueueing; NULL until
-- a sweep picks it (its creation counts as the first pick). Like
-- deliveries.enqueued_at, it keeps concurrent and consecutive sweeps from
-- flooding a slow fan-out with copies of one event.
ALTER TABLE events ADD COLUMN enqueued_at timestamptz;

-- The sweep takes unfanned events oldest first whose last pick,
-- COALESCE(enqueued_at, created_at), is older than the requeue window. The
-- leading (created_at, id) keeps it an ordered index scan that stops after
-- LIMIT rows and is bounded by created_at (a pick is never before the
-- creation); the pick time as a third key column is checked inside the
-- index, so events picked recently (a fan-out backlog) are skipped without
-- visiting the heap. Fanned-out rows still leave the index, so it stays
-- tiny in steady state; ingest inserts the same one entry per event as
-- before.
DROP INDEX events_unfanned_idx;
CREATE INDEX events_unfanned_idx ON events (created_at, id, (COALESCE(enqueued_at, created_at)))
    WHERE fanned_out_at IS NULL;

-- ListDeliveries filters by any of subscription_id, event_id and status and
-- pages in id order (keyset: id > cursor). Every update of a delivery on the
-- hot path (claim, attempt) changes indexed columns, so it is never HOT and
-- writes an entry into every index whose predicate the new row version
-- matches; a listing index over all rows would tax every delivery for an
-- operator's query. Delivered rows, the bulk of the table, therefore stay
-- out of the new indexes. What serves each filter:
--
--  * none, or status = delivered: the primary key (delivered rows are most
--    rows, so the filter discards few).
--  * event_id (+ anything): the (event_id, subscription_id) unique index;
--    an event has one delivery per subscription at most, cheap to sort.
--  * subscription_id, or subscription_id + delivered:
--    deliveries_subscription_idx (subscription_id, id).
--  * status alone, other than delivered: deliveries_status_idx below. In-
--    flight and dead rows are few and, in id order, bunched at the young end
--    (dead ones scattered), so walking the primary key and filtering would
--    read most of the table before it found a page of, say, retrying rows
--    (measured: 850 ms at 2M rows, linear in the table). It replaces
--    deliveries_dead_idx (id) WHERE dead, so dead rows cost no more than
--    before; what it adds is one entry per in-flight row version: on insert,
--    on claim and on each retry, the price of never scanning the table.
--  * subscription_id + dead, one endpoint's dead letters:
--    deliveries_subscription_dead_id_idx below. They grow without bound
--    while an endpoint is down, so they must be read in id order rather
--    than sorted (deliveries_subscription_dead_idx is ordered by updated_at
--    for recovery and stays). Partial on dead rows: written when a delivery
--    dies or is recovered, never on the hot path.
--  * subscription_id + an in-flight status: deliveries_status_idx filtered
--    by subscription, bounded by the in-flight backlog of that status; the
--    planner uses the subscription's index instead when the subscription
--    is small. A (subscription_id, status, id) index would be exact, at the
--    price of another entry per in-flight row version on the hot path.
DROP INDEX deliveries_dead_idx;
CREATE INDEX deliveries_status_idx ON deliveries (status, id)
    WHERE status IN ('pending', 'retrying', 'delivering', 'dead');
CREATE INDEX deliveries_subscription_dead_id_idx ON deliveries (subscription_id, id)
    WHERE status = 'dead';

-- +goose Down
DROP INDEX deliveries_subscription_dead_id_idx;
DROP INDEX deliveries_status_idx;
CREATE INDEX deliveries_dead_idx ON deliveries (id) WHERE status = 'dead';
DROP INDEX events_unfanned_idx;
CREATE INDEX events_unfanned_idx ON events (created_at, id)
    WHERE fanned_out_at IS NULL;
ALTER TABLE events DROP COLUMN enqueued_at;
