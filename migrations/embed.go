// Package migrations holds Dispatch's PostgreSQL schema as numbered goose SQL
// migrations, embedded so the binary can migrate a database with nothing
// else on disk (`dispatch migrate`). The files are also sqlc's schema.
//
// Rule of dependency: standard library only; adapters/postgres applies FS.
package migrations

import "embed"

// FS holds every migration file, named NNNNN_description.sql so goose applies
// them in order.
//
//go:embed *.sql
var FS embed.FS
