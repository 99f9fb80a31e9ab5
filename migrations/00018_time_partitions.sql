-- Events, deliveries and attempts become range-partitioned by id (attempts
-- by delivery_id), so that history ages out by dropping whole partitions
-- (SPEC §5). Ids sort by time (ULIDs in collation "C", migration 00008),
-- and a delivery's id carries its event's time (domain.DeliveryID), so one
-- time window [t0, t1) is the same id range in each table: from the ULID
-- of t0 with an all-zero rest to that of t1, after the table's prefix.
-- Everything about one event lives in one window of each table.
--
-- The tables are turned into partitioned ones without copying a row: each
-- is renamed to <table>_legacy, a partitioned parent with the same
-- columns, defaults, checks and indexes takes its name, and the old table
-- is attached as its first partition, from MINVALUE to the bound of the
-- migration's time. A CHECK for that bound, validated first, lets the
-- attach skip its scan; the legacy indexes are attached to the parent's
-- as they are. Only the deliveries' index on (event_id, subscription_id)
-- is built anew: the parent's cannot be unique (a unique index of a
-- partitioned table must hold the partition key), and the id, which now
-- derives from the pair, keeps it unique instead. Rows still sort
-- correctly: legacy delivery ids carry their creation time, which is
-- before the bound. The windows after the bound are made by the
-- scheduler's partition maintenance (adapters/postgres/partitions.go),
-- and by every process on start, before it writes.
--
-- The view event_states follows a renamed table, so it is made again.

-- +goose Up
DROP VIEW event_states;

ALTER TABLE events RENAME TO events_legacy;
ALTER TABLE deliveries RENAME TO deliveries_legacy;
ALTER TABLE attempts RENAME TO attempts_legacy;
ALTER INDEX events_pkey RENAME TO events_legacy_pkey;
ALTER INDEX events_unfanned_idx RENAME TO events_legacy_unfanned_idx;
ALTER INDEX events_unfanned_key_idx RENAME TO events_legacy_unfanned_key_idx;
ALTER INDEX events_unfanned_type_idx RENAME TO events_legacy_unfanned_type_idx;
ALTER INDEX deliveries_pkey RENAME TO deliveries_legacy_pkey;
ALTER INDEX deliveries_due_idx RENAME TO deliveries_legacy_due_idx;
ALTER INDEX deliveries_enqueued_idx RENAME TO deliveries_legacy_enqueued_idx;
ALTER INDEX deliveries_ordering_idx RENAME TO deliveries_legacy_ordering_idx;
ALTER INDEX deliveries_status_idx RENAME TO deliveries_legacy_status_idx;
ALTER INDEX deliveries_subscription_dead_id_idx RENAME TO deliveries_legacy_subscription_dead_id_idx;
ALTER INDEX deliveries_subscription_idx RENAME TO deliveries_legacy_subscription_idx;
ALTER INDEX attempts_pkey RENAME TO attempts_legacy_pkey;

CREATE TABLE events (LIKE events_legacy INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
    PARTITION BY RANGE (id);
ALTER TABLE events ADD PRIMARY KEY (id);
CREATE INDEX events_unfanned_idx ON events (created_at, id, COALESCE(enqueued_at, created_at))
    WHERE fanned_out_at IS NULL;
CREATE INDEX events_unfanned_key_idx ON events (ordering_key COLLATE "C", id)
    WHERE fanned_out_at IS NULL AND ordering_key <> '';
CREATE INDEX events_unfanned_type_idx ON events (type COLLATE "C", id)
    WHERE fanned_out_at IS NULL;

CREATE TABLE deliveries (LIKE deliveries_legacy INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
    PARTITION BY RANGE (id);
ALTER TABLE deliveries ADD PRIMARY KEY (id);
-- An event's deliveries (reads, event_states); no longer unique, see above.
CREATE INDEX deliveries_event_idx ON deliveries (event_id, subscription_id);
CREATE INDEX deliveries_due_idx ON deliveries (next_attempt_at, id)
    WHERE enqueued_at IS NULL AND status IN ('pending', 'retrying', 'delivering');
CREATE INDEX deliveries_enqueued_idx ON deliveries (enqueued_at, id)
    WHERE enqueued_at IS NOT NULL AND status IN ('pending', 'retrying', 'delivering');
CREATE INDEX deliveries_ordering_idx ON deliveries (subscription_id, ordering_key, event_id)
    WHERE ordering_key <> '' AND status IN ('pending', 'retrying', 'delivering');
CREATE INDEX deliveries_status_idx ON deliveries (status, id)
    WHERE status IN ('pending', 'retrying', 'delivering', 'dead');
CREATE INDEX deliveries_subscription_dead_id_idx ON deliveries (subscription_id, id)
    WHERE status = 'dead';
CREATE INDEX deliveries_subscription_idx ON deliveries (subscription_id, id);

CREATE TABLE attempts (LIKE attempts_legacy INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
    PARTITION BY RANGE (delivery_id);
ALTER TABLE attempts ADD PRIMARY KEY (delivery_id, attempt);

-- The bounds of the migration's time (now(): the transaction's start),
-- as domain.IDBound makes them: the millisecond in ten base-32 digits,
-- then sixteen zeros.
-- +goose StatementBegin
DO $$
DECLARE
    ms bigint := floor(extract(epoch FROM now()) * 1000);
    digits text := '';
    evt text;
    dlv text;
BEGIN
    FOR i IN REVERSE 9..0 LOOP
        digits := digits || substr('0123456789ABCDEFGHJKMNPQRSTVWXYZ', ((ms >> (5 * i)) & 31)::int + 1, 1);
    END LOOP;
    evt := 'evt_' || digits || repeat('0', 16);
    dlv := 'dlv_' || digits || repeat('0', 16);
    EXECUTE format('ALTER TABLE events_legacy ADD CONSTRAINT events_legacy_bound CHECK (id < %L) NOT VALID', evt);
    EXECUTE format('ALTER TABLE deliveries_legacy ADD CONSTRAINT deliveries_legacy_bound CHECK (id < %L) NOT VALID', dlv);
    EXECUTE format('ALTER TABLE attempts_legacy ADD CONSTRAINT attempts_legacy_bound CHECK (delivery_id < %L) NOT VALID', dlv);
    ALTER TABLE events_legacy VALIDATE CONSTRAINT events_legacy_bound;
    ALTER TABLE deliveries_legacy VALIDATE CONSTRAINT deliveries_legacy_bound;
    ALTER TABLE attempts_legacy VALIDATE CONSTRAINT attempts_legacy_bound;
    EXECUTE format('ALTER TABLE events ATTACH PARTITION events_legacy FOR VALUES FROM (MINVALUE) TO (%L)', evt);
    EXECUTE format('ALTER TABLE deliveries ATTACH PARTITION deliveries_legacy FOR VALUES FROM (MINVALUE) TO (%L)', dlv);
    EXECUTE format('ALTER TABLE attempts ATTACH PARTITION attempts_legacy FOR VALUES FROM (MINVALUE) TO (%L)', dlv);
END
$$;
-- +goose StatementEnd

ALTER TABLE deliveries_legacy DROP CONSTRAINT deliveries_event_id_subscription_id_key;

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
-- Back to plain tables: the legacy partitions are detached, the rows of
-- every later window moved into them, and the parents (with those
-- windows) dropped. A legacy partition the retention dropped already is
-- made again, empty, first, with the names the rest expects.
DROP VIEW event_states;

-- +goose StatementBegin
DO $$
DECLARE
    t text;
    upper text;
    idx record;
BEGIN
    FOREACH t IN ARRAY ARRAY['events', 'deliveries', 'attempts'] LOOP
        CONTINUE WHEN to_regclass(t || '_legacy') IS NOT NULL;
        SELECT min(substring(pg_get_expr(c.relpartbound, c.oid) FROM 'FROM \(''([^'']*)''\)')) INTO upper
        FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = t::regclass;
        EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING CONSTRAINTS)%s',
            t || '_legacy', t, CASE WHEN t = 'deliveries' THEN ' WITH (fillfactor = 70)' ELSE '' END);
        EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I CHECK (%I < %L)', t || '_legacy', t || '_legacy_bound',
            CASE WHEN t = 'attempts' THEN 'delivery_id' ELSE 'id' END, coalesce(upper, '~'));
        EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (MINVALUE) TO (%L)',
            t, t || '_legacy', coalesce(upper, '~'));
        -- The indexes the attach made, named as migration 00018's Up left them.
        FOR idx IN SELECT ci.relname AS child, pi.relname AS parent
                   FROM pg_inherits i JOIN pg_class ci ON ci.oid = i.inhrelid JOIN pg_class pi ON pi.oid = i.inhparent
                   JOIN pg_index x ON x.indexrelid = ci.oid
                   WHERE x.indrelid = (t || '_legacy')::regclass LOOP
            CONTINUE WHEN idx.child = t || '_legacy_' || substring(idx.parent FROM length(t) + 2);
            EXECUTE format('ALTER INDEX %I RENAME TO %I', idx.child, t || '_legacy_' || substring(idx.parent FROM length(t) + 2));
        END LOOP;
    END LOOP;
END
$$;
-- +goose StatementEnd

ALTER TABLE events DETACH PARTITION events_legacy;
ALTER TABLE deliveries DETACH PARTITION deliveries_legacy;
ALTER TABLE attempts DETACH PARTITION attempts_legacy;
ALTER TABLE events_legacy DROP CONSTRAINT events_legacy_bound;
ALTER TABLE deliveries_legacy DROP CONSTRAINT deliveries_legacy_bound;
ALTER TABLE attempts_legacy DROP CONSTRAINT attempts_legacy_bound;
INSERT INTO events_legacy SELECT * FROM events;
INSERT INTO deliveries_legacy SELECT * FROM deliveries;
INSERT INTO attempts_legacy SELECT * FROM attempts;
DROP TABLE events, deliveries, attempts;

ALTER TABLE events_legacy RENAME TO events;
ALTER TABLE deliveries_legacy RENAME TO deliveries;
ALTER TABLE attempts_legacy RENAME TO attempts;
ALTER INDEX events_legacy_pkey RENAME TO events_pkey;
ALTER INDEX events_legacy_unfanned_idx RENAME TO events_unfanned_idx;
ALTER INDEX events_legacy_unfanned_key_idx RENAME TO events_unfanned_key_idx;
ALTER INDEX events_legacy_unfanned_type_idx RENAME TO events_unfanned_type_idx;
ALTER INDEX deliveries_legacy_pkey RENAME TO deliveries_pkey;
ALTER INDEX deliveries_legacy_due_idx RENAME TO deliveries_due_idx;
ALTER INDEX deliveries_legacy_enqueued_idx RENAME TO deliveries_enqueued_idx;
ALTER INDEX deliveries_legacy_ordering_idx RENAME TO deliveries_ordering_idx;
ALTER INDEX deliveries_legacy_status_idx RENAME TO deliveries_status_idx;
ALTER INDEX deliveries_legacy_subscription_dead_id_idx RENAME TO deliveries_subscription_dead_id_idx;
ALTER INDEX deliveries_legacy_subscription_idx RENAME TO deliveries_subscription_idx;
ALTER INDEX attempts_legacy_pkey RENAME TO attempts_pkey;
-- +goose StatementBegin
DO $$
DECLARE
    idx text;
BEGIN
    -- The (event_id, subscription_id) index the attach built, by whatever
    -- name it got.
    FOR idx IN SELECT indexrelid::regclass::text FROM pg_index
               WHERE indrelid = 'deliveries'::regclass AND NOT indisunique
                 AND indkey::int2[] = ARRAY[2, 3]::int2[] AND indpred IS NULL LOOP
        EXECUTE format('DROP INDEX %s', idx);
    END LOOP;
END
$$;
-- +goose StatementEnd
ALTER TABLE deliveries ADD CONSTRAINT deliveries_event_id_subscription_id_key
    UNIQUE (event_id, subscription_id);

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
