-- Changes to subscriptions, one by one, so that the copies processes keep
-- of them (inline fan-out at ingest, the fan-out stage, the worker's takes)
-- are brought up to date by what changed instead of being loaded whole
-- (ports.SubscriptionStore.SubscriptionChanges).
--
-- Every statement writing subscriptions moves the change counter of
-- migration 00005 once, before its first row, and the rows it writes are
-- stamped with the new value in their version column; the rows it deletes
-- leave their id with that value in deleted_subscriptions. The counter is
-- one row that each such statement updates, so a transaction changing
-- subscriptions holds its lock until it commits: changes commit in counter
-- order, and a reader that sees the counter at v sees every change
-- numbered up to v. "What changed after v" is then the rows and the
-- deleted ids numbered above v. (Moving the counter per row instead made a
-- statement writing many rows quadratic: each update of the one counter
-- row in a transaction walks the versions of it the transaction made.)
-- The statement's number is handed to its row triggers in a setting local
-- to the transaction.
--
-- TRUNCATE is refused: it leaves no ids behind, so the copies could not
-- learn what went.

-- +goose Up
ALTER TABLE subscriptions ADD COLUMN version bigint NOT NULL DEFAULT 0;
CREATE INDEX subscriptions_by_version ON subscriptions (version, id);

CREATE TABLE deleted_subscriptions (
    id       text   PRIMARY KEY,
    version  bigint NOT NULL
);
CREATE INDEX deleted_subscriptions_by_version ON deleted_subscriptions (version);

DROP TRIGGER subscriptions_changed ON subscriptions;
DROP FUNCTION bump_subscription_version();

-- +goose StatementBegin
CREATE FUNCTION next_subscription_version() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    next bigint;
BEGIN
    UPDATE subscription_version SET version = version + 1 RETURNING version INTO next;
    PERFORM set_config('dispatch.subscription_version', next::text, true);
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION stamp_subscription_version() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.version := current_setting('dispatch.subscription_version')::bigint;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION record_subscription_deletion() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO deleted_subscriptions (id, version)
    VALUES (OLD.id, current_setting('dispatch.subscription_version')::bigint)
    ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION refuse_subscriptions_truncate() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'TRUNCATE subscriptions is not supported: DELETE them, so the copies processes keep learn which went';
END
$$;
-- +goose StatementEnd

CREATE TRIGGER subscriptions_numbered
    BEFORE INSERT OR UPDATE OR DELETE ON subscriptions
    FOR EACH STATEMENT EXECUTE FUNCTION next_subscription_version();
CREATE TRIGGER subscriptions_stamped
    BEFORE INSERT OR UPDATE ON subscriptions
    FOR EACH ROW EXECUTE FUNCTION stamp_subscription_version();
CREATE TRIGGER subscriptions_deleted
    AFTER DELETE ON subscriptions
    FOR EACH ROW EXECUTE FUNCTION record_subscription_deletion();
CREATE TRIGGER subscriptions_not_truncated
    BEFORE TRUNCATE ON subscriptions
    FOR EACH STATEMENT EXECUTE FUNCTION refuse_subscriptions_truncate();

-- +goose Down
DROP TRIGGER subscriptions_not_truncated ON subscriptions;
DROP TRIGGER subscriptions_deleted ON subscriptions;
DROP TRIGGER subscriptions_stamped ON subscriptions;
DROP TRIGGER subscriptions_numbered ON subscriptions;
DROP FUNCTION refuse_subscriptions_truncate();
DROP FUNCTION record_subscription_deletion();
DROP FUNCTION stamp_subscription_version();
DROP FUNCTION next_subscription_version();
DROP TABLE deleted_subscriptions;
DROP INDEX subscriptions_by_version;
ALTER TABLE subscriptions DROP COLUMN version;

-- +goose StatementBegin
CREATE FUNCTION bump_subscription_version() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE subscription_version SET version = version + 1;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER subscriptions_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON subscriptions
    FOR EACH STATEMENT EXECUTE FUNCTION bump_subscription_version();
