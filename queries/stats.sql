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
