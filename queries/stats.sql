-- name: UndeliveredCounts :many
-- The backlog gauges. deliveries_status_idx covers every status but
-- delivered, so this is an index-only count of the undelivered rows.
-- A leased pending or retrying delivery counts as delivering (migration
-- 00006).
SELECT
    (CASE WHEN lease_until IS NOT NULL AND status IN ('pending', 'retrying')
          THEN 'delivering' ELSE status END)::text AS status,
    count(*)::bigint AS n
FROM deliveries
WHERE status IN ('pending', 'delivering', 'retrying', 'dead')
GROUP BY 1;

-- name: TableUsage :many
-- The storage gauges: each history table's rows, as the planner's
-- statistics estimate them (kept by autovacuum; -1 before a table was
-- first analyzed), and the bytes it takes with its indexes and TOAST:
-- the sums over its partitions (the partitioned parent, relkind 'p',
-- holds nothing and would count the rows again).
SELECT
    t.name::text AS name,
    coalesce(sum(greatest(c.reltuples, 0)), 0)::bigint AS rows,
    coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint AS bytes
FROM unnest(ARRAY['events', 'deliveries', 'attempts']::text[]) AS t(name)
LEFT JOIN pg_catalog.pg_class c
    ON c.relnamespace = current_schema()::regnamespace
   AND c.relkind = 'r'
   AND (c.relname = t.name OR c.oid IN (
        SELECT inhrelid FROM pg_catalog.pg_inherits WHERE inhparent = to_regclass(t.name)))
GROUP BY t.name
ORDER BY t.name;
