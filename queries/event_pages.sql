-- name: EventDeliveriesPage :many
-- One page of an event's deliveries in subscription id order: a range scan
-- of the (event_id, subscription_id) unique index that stops at the page's
-- end, however many deliveries the event has.
SELECT * FROM deliveries
WHERE event_id = @event_id AND subscription_id > @after_subscription
ORDER BY subscription_id
LIMIT @max_rows;

-- name: EventAttemptsPage :many
-- One page of an event's attempts, by subscription id then attempt number,
-- after (@after_subscription, @after_attempt). The deliveries come from
-- the (event_id, subscription_id) index in order, each joined to its
-- attempts by the attempts' primary key, so the scan stops at the page's
-- end; the first condition bounds the index range, the second drops the
-- attempts of the cursor's own delivery up to the cursor.
SELECT a.* FROM deliveries d
JOIN attempts a ON a.delivery_id = d.id
WHERE d.event_id = @event_id
  AND d.subscription_id >= @after_subscription::text
  AND (d.subscription_id > @after_subscription::text OR a.attempt > @after_attempt::int)
ORDER BY d.subscription_id, a.attempt
LIMIT @max_rows;
