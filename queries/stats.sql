-- name: UndeliveredCounts :many
-- The backlog gauges. deliveries_status_idx covers every status but
-- delivered, so this is an index-only count of the undelivered rows.
SELECT status, count(*)::bigint AS n
FROM deliveries
WHERE status IN ('pending', 'delivering', 'retrying', 'dead')
GROUP BY status;
