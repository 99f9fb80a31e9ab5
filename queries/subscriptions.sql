-- name: CreateSubscription :exec
INSERT INTO subscriptions (
    id, url, event_types, description, secret, previous_secret,
    previous_secret_expires_at, active, disabled_reason, rate_limit,
    max_in_flight, timeout, retry_policy, ordering_key, headers,
    created_at, updated_at
) VALUES (
    @id, @url, @event_types, @description, @secret, @previous_secret,
    @previous_secret_expires_at, @active, @disabled_reason, @rate_limit,
    @max_in_flight, @timeout, @retry_policy, @ordering_key, @headers,
    @created_at, @updated_at
);

-- name: GetSubscription :one
SELECT * FROM subscriptions WHERE id = @id;

-- name: GetSubscriptionForUpdate :one
-- Locks the row until the transaction ends, so concurrent updates of one
-- subscription apply one after the other.
SELECT * FROM subscriptions WHERE id = @id FOR UPDATE;

-- name: ListSubscriptions :many
SELECT * FROM subscriptions
WHERE id > @after
ORDER BY id
LIMIT @max_rows;

-- name: ActiveSubscriptions :many
SELECT * FROM subscriptions WHERE active ORDER BY id;

-- name: UpdateSubscription :exec
UPDATE subscriptions SET
    url = @url,
    event_types = @event_types,
    description = @description,
    secret = @secret,
    previous_secret = @previous_secret,
    previous_secret_expires_at = @previous_secret_expires_at,
    active = @active,
    disabled_reason = @disabled_reason,
    rate_limit = @rate_limit,
    max_in_flight = @max_in_flight,
    timeout = @timeout,
    retry_policy = @retry_policy,
    ordering_key = @ordering_key,
    headers = @headers,
    updated_at = @updated_at
WHERE id = @id;

-- name: DeleteSubscription :execrows
-- Deliveries and their attempts go with it (ON DELETE CASCADE).
DELETE FROM subscriptions WHERE id = @id;
