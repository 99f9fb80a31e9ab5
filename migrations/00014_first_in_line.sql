-- SPEC §3: an ordered delivery is held back only by deliveries of its own
-- subscription and key, never by another subscription's events nor by an
-- event that failed to fan out. The rule lives here, once, for every
-- statement that asks it (ClaimDeliveries, HoldDelivery, DueDeliveries,
-- NextInLine); the in-memory store asks domain.Subscription.MayPrecede.
--
-- A delivery is first in line unless
--
-- - a delivery of the same subscription and key for an earlier event
--   (smaller event id) is pending, retrying or delivering (one probe of
--   deliveries_ordering_idx), or
-- - an earlier event is not fanned out yet and could get a delivery of
--   that subscription and key once it is: its type matches the
--   subscription's event types (event_type_matches, domain.MatchType), and
--   its key under the subscription's pointer is the same. The key is
--   computed exactly for /ordering_key, /type, /source and /id
--   (ordering_key_text, domain.OrderingKeyFor); for a pointer into data,
--   which is stored as bytes and whose JSON rules (the first of repeated
--   members, numbers as written) the database does not share, any key is
--   taken to match, so such an event holds the subscription's every key
--   until it is fanned out: ordering is never broken, only delayed. An
--   event settled as failed (migration 00013) is fanned out, and holds
--   nothing back.
--
-- The unfanned events are read from events_unfanned_idx, tiny in steady
-- state. Comparisons are made in collation "C", the columns' (migration
-- 00008), whatever collation the caller's arguments carry, so the indexes
-- apply.

-- +goose Up

-- +goose StatementBegin
CREATE FUNCTION event_type_matches(patterns text[], event_type text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT EXISTS (
        SELECT 1 FROM unnest(patterns) AS p (pattern)
        WHERE p.pattern = '*'
           OR p.pattern = event_type
           OR (right(p.pattern, 2) = '.*'
               AND length(event_type) > length(p.pattern) - 1
               AND starts_with(event_type, left(p.pattern, -1)))
    )
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION ordering_key_text(value text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN octet_length(value) > 256
        THEN 'sha256:' || encode(sha256(convert_to(value, 'UTF8')), 'hex')
        ELSE value END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION first_in_line(p_subscription_id text, p_ordering_key text, p_event_id text) RETURNS boolean
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $$
BEGIN
    IF p_ordering_key = '' THEN
        RETURN true;
    END IF;
    RETURN NOT EXISTS (
        SELECT 1 FROM deliveries earlier
        WHERE earlier.subscription_id = p_subscription_id COLLATE "C"
          AND earlier.ordering_key = p_ordering_key COLLATE "C"
          AND earlier.ordering_key <> ''
          AND earlier.status IN ('pending', 'retrying', 'delivering')
          AND earlier.event_id < p_event_id COLLATE "C"
    ) AND NOT EXISTS (
        SELECT 1 FROM events unfanned
        JOIN subscriptions s ON s.id = p_subscription_id COLLATE "C"
        WHERE unfanned.fanned_out_at IS NULL
          AND unfanned.id < p_event_id COLLATE "C"
          AND event_type_matches(s.event_types, unfanned.type)
          AND CASE s.ordering_key
              WHEN '' THEN false
              WHEN '/ordering_key' THEN ordering_key_text(unfanned.ordering_key) = p_ordering_key COLLATE "C"
              WHEN '/type' THEN ordering_key_text(unfanned.type) = p_ordering_key COLLATE "C"
              WHEN '/source' THEN ordering_key_text(unfanned.source) = p_ordering_key COLLATE "C"
              WHEN '/id' THEN unfanned.id = p_ordering_key COLLATE "C"
              ELSE true
          END
    );
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION first_in_line(text, text, text);
DROP FUNCTION ordering_key_text(text);
DROP FUNCTION event_type_matches(text[], text);
