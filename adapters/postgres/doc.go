// Package postgres is Dispatch's PostgreSQL store: ports.Store on pgx and
// sqlc, and the embedded migrations applied with goose. PostgreSQL is the
// source of truth; every write the port promises as durable is committed
// before a method returns.
//
// Every query is a named sqlc query in queries/ (generated into sqlcgen).
// sqlc models, pgx errors and SQLSTATE codes never leave this package: rows
// become domain types and errors become domain sentinels here, at the seam.
//
// Subscriptions' secrets and custom headers are sealed with a keyring.Ring
// (Encryption) in the row mapping, so domain values stay plaintext.
//
// Rule of dependency: imports domain, ports, migrations, sqlcgen, pgx,
// goose, internal/batch (the technology-neutral batching of CreateEvent) and
// keyring (the sealing of values at rest);
// nothing imports it but bootstrap and tests.
package postgres
