-- A counter of changes to subscriptions, for inline fan-out at ingest
-- (SPEC §2). The API matches each new event against a cached copy of the
-- active subscriptions, and every group commit of events checks this one
-- row (the insert statement itself, since InsertEventsFannedOut took the
-- check over): when it moved, the copy is loaded again. A statement-level
-- trigger bumps it on every write to subscriptions, whatever statement
-- made it, so no writer can forget to.

-- +goose Up
CREATE TABLE subscription_version (
    only_row  boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    version   bigint  NOT NULL
);
INSERT INTO subscription_version (only_row, version) VALUES (true, 0);

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

-- +goose Down
DROP TRIGGER subscriptions_changed ON subscriptions;
DROP FUNCTION bump_subscription_version();
DROP TABLE subscription_version;
