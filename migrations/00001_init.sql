-- Dispatch's schema: subscriptions, events, deliveries and attempts.
--
-- Ids are text: a Stripe-style prefix and a ULID (evt_01J...), so they sort
-- by creation time and every primary key index grows at its right edge.
-- Free-text columns are NOT NULL DEFAULT '' (the empty string is "none" in
-- the domain too); optional times and HTTP status codes are NULL when absent.

-- +goose Up
CREATE TABLE subscriptions (
    id                          text        PRIMARY KEY,
    url                         text        NOT NULL,
    event_types                 text[]      NOT NULL,
    description                 text        NOT NULL DEFAULT '',
    -- Secrets in their whsec_ form. previous_secret keeps signing until
    -- previous_secret_expires_at (rotation overlap); '' when none.
    secret                      text        NOT NULL,
    previous_secret             text        NOT NULL DEFAULT '',
    previous_secret_expires_at  timestamptz,
    active                      boolean     NOT NULL DEFAULT true,
    disabled_reason             text        NOT NULL DEFAULT '',
    rate_limit                  integer     NOT NULL CHECK (rate_limit > 0),
    max_in_flight               integer     NOT NULL CHECK (max_in_flight > 0),
    timeout                     interval    NOT NULL,
    retry_policy                jsonb       NOT NULL,
    ordering_key                text        NOT NULL DEFAULT '',
    headers                     jsonb       NOT NULL DEFAULT '{}',
    created_at                  timestamptz NOT NULL,
    updated_at                  timestamptz NOT NULL
);

-- Fan-out loads every active subscription on each batch.
CREATE INDEX subscriptions_active_idx ON subscriptions (id) WHERE active;

CREATE TABLE events (
    id               text        PRIMARY KEY,
    type             text        NOT NULL,
    source           text        NOT NULL DEFAULT '',
    -- The compact JSON object exactly as received. bytea, not jsonb: jsonb
    -- reorders keys and normalises numbers, and receivers may verify the
    -- signature over the body they got.
    data             bytea       NOT NULL,
    ordering_key     text        NOT NULL DEFAULT '',
    idempotency_key  text,
    status           text        NOT NULL DEFAULT 'pending'
                                 CHECK (status IN ('pending', 'delivered', 'failed')),
    -- NULL until fan-out has recorded the event's deliveries (the outbox).
    fanned_out_at    timestamptz,
    created_at       timestamptz NOT NULL
);

-- One live event per idempotency key; INSERT ... ON CONFLICT relies on it to
-- make concurrent publishes with one key store a single event. An expired
-- key is released (set to NULL) before it is reused.
CREATE UNIQUE INDEX events_idempotency_key_idx ON events (idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- The outbox sweep: events committed but never fanned out. Tiny in steady
-- state because fanned-out rows leave the index.
CREATE INDEX events_unfanned_idx ON events (created_at, id)
    WHERE fanned_out_at IS NULL;

CREATE TABLE deliveries (
    id                text        PRIMARY KEY,
    event_id          text        NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    subscription_id   text        NOT NULL REFERENCES subscriptions (id) ON DELETE CASCADE,
    status            text        NOT NULL
                                  CHECK (status IN ('pending', 'delivering', 'retrying', 'delivered', 'dead')),
    attempts          integer     NOT NULL DEFAULT 0,
    -- When the next attempt may start; while delivering, the end of the
    -- worker's lease, so a dead worker's delivery becomes due again.
    next_attempt_at   timestamptz NOT NULL,
    -- When the delivery was last appended to the queue; NULL once an attempt
    -- was recorded. The scheduler re-enqueues a due delivery whose mark is
    -- older than its requeue window (the append was lost).
    enqueued_at       timestamptz,
    last_status_code  integer,
    last_error        text        NOT NULL DEFAULT '',
    -- Why the delivery was last postponed without an attempt (throttled,
    -- circuit_open).
    reason            text        NOT NULL DEFAULT '',
    -- The resolved ordering key; '' when unordered.
    ordering_key      text        NOT NULL DEFAULT '',
    created_at        timestamptz NOT NULL,
    updated_at        timestamptz NOT NULL,
    -- Fan-out makes at most one delivery of an event per subscription.
    UNIQUE (event_id, subscription_id)
);

-- The scheduler's due scan. Terminal deliveries, the vast majority, stay out
-- of the index.
CREATE INDEX deliveries_due_idx ON deliveries (next_attempt_at, id)
    WHERE status IN ('pending', 'retrying', 'delivering');

-- Every update of a delivery (claim, attempt) changes indexed columns, so
-- it writes a new entry into each index that covers the row: deliveries
-- carry few indexes, and those for rare states are partial.

-- Listing a subscription's deliveries, and cascading its deletion.
CREATE INDEX deliveries_subscription_idx ON deliveries (subscription_id, id);

-- Dead letters: listing them (GET /v1/deliveries?status=dead) and
-- recovering a subscription's dead deliveries since a time.
CREATE INDEX deliveries_dead_idx ON deliveries (id) WHERE status = 'dead';
CREATE INDEX deliveries_subscription_dead_idx ON deliveries (subscription_id, updated_at)
    WHERE status = 'dead';

-- Ordering: whether an earlier delivery with the same key is still in flight
-- for the subscription.
CREATE INDEX deliveries_ordering_idx ON deliveries (subscription_id, ordering_key, id)
    WHERE ordering_key <> '' AND status IN ('pending', 'retrying', 'delivering');

CREATE TABLE attempts (
    delivery_id      text        NOT NULL REFERENCES deliveries (id) ON DELETE CASCADE,
    subscription_id  text        NOT NULL,
    -- 1-based. The primary key fences a worker whose lease expired: a second
    -- worker recording the same attempt number conflicts.
    attempt          integer     NOT NULL CHECK (attempt > 0),
    -- NULL when no response arrived (timeout, connection or TLS error).
    status_code      integer,
    -- Truncated response body, bytes as received (they need not be UTF-8).
    response_body    bytea       NOT NULL DEFAULT '',
    error            text        NOT NULL DEFAULT '',
    duration         interval    NOT NULL,
    created_at       timestamptz NOT NULL,
    PRIMARY KEY (delivery_id, attempt)
);

-- +goose Down
DROP TABLE attempts;
DROP TABLE deliveries;
DROP TABLE events;
DROP TABLE subscriptions;
