package loadtest

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dispatch-webhooks/dispatch/adapters/postgres"
	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/internal/batch"
)

// The durable floor (floor --durable) adds to the relay what no webhook
// sender that keeps SPEC's promises can leave out: the event is committed
// to PostgreSQL before the 202 (a 202 means stored), and each attempt is
// committed once the endpoint answered (every attempt recorded). Both
// commits are group commits with Dispatch's own lingers, so the relay
// batches as much as Dispatch may at the same rate and latency. It has no
// queue, no second process, no protections and no claim: what Dispatch
// spends above it is those.

// floorSchema is the durable relay's two tables: the least an event and
// an attempt can be stored as.
const floorSchema = `
CREATE TABLE IF NOT EXISTS floor_events (
	id text PRIMARY KEY, type text NOT NULL, source text NOT NULL,
	data jsonb NOT NULL, created_at timestamptz NOT NULL);
CREATE TABLE IF NOT EXISTS floor_attempts (
	event_id text NOT NULL, status_code int NOT NULL,
	duration_us bigint NOT NULL, created_at timestamptz NOT NULL,
	PRIMARY KEY (event_id, created_at));`

// floorEvent and floorAttempt are rows of the durable relay's tables.
type floorEvent struct {
	id, typ, source string
	data            []byte
	at              time.Time
}

type floorAttempt struct {
	eventID    string
	statusCode int
	took       time.Duration
	at         time.Time
}

// floorStore commits the durable relay's events and attempts in group
// commits.
type floorStore struct {
	pool     *pgxpool.Pool
	events   *batch.Batcher[floorEvent]
	attempts *batch.Batcher[floorAttempt]
}

// openFloorStore connects to the database dsn names and makes the tables.
func openFloorStore(ctx context.Context, dsn string) (*floorStore, error) {
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("connect to the floor's database: %w", err)
	}
	if _, err := pool.Exec(ctx, floorSchema); err != nil {
		pool.Close()
		return nil, fmt.Errorf("make the floor's tables: %w", err)
	}
	s := &floorStore{pool: pool}
	s.events = batch.New(s.writeEvents, batch.Limits[floorEvent]{Linger: postgres.EventLinger, Enough: postgres.EventEnough})
	s.attempts = batch.New(s.writeAttempts, batch.Limits[floorAttempt]{Linger: domain.AfterAnswerLinger, Enough: domain.AfterAnswerEnough})
	return s, nil
}

func (s *floorStore) close() { s.pool.Close() }

// writeEvents stores a batch of events in one statement and commit.
func (s *floorStore) writeEvents(ctx context.Context, items []floorEvent, errs []error) {
	ids, types, sources, data, ats := make([]string, len(items)), make([]string, len(items)),
		make([]string, len(items)), make([]string, len(items)), make([]time.Time, len(items))
	for i, e := range items {
		ids[i], types[i], sources[i], data[i], ats[i] = e.id, e.typ, e.source, string(e.data), e.at
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO floor_events (id, type, source, data, created_at)
		SELECT id, type, source, data::jsonb, at FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::timestamptz[])
		AS t(id, type, source, data, at)`, ids, types, sources, data, ats)
	fillErrs(errs, err)
}

// writeAttempts stores a batch of attempts in one statement and commit.
func (s *floorStore) writeAttempts(ctx context.Context, items []floorAttempt, errs []error) {
	ids, codes, took, ats := make([]string, len(items)), make([]int32, len(items)), make([]int64, len(items)), make([]time.Time, len(items))
	for i, a := range items {
		ids[i], codes[i], took[i], ats[i] = a.eventID, int32(a.statusCode), a.took.Microseconds(), a.at
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO floor_attempts (event_id, status_code, duration_us, created_at)
		SELECT * FROM unnest($1::text[], $2::int[], $3::bigint[], $4::timestamptz[])`, ids, codes, took, ats)
	fillErrs(errs, err)
}

func fillErrs(errs []error, err error) {
	for i := range errs {
		errs[i] = err
	}
}

// floorDatabase is a durable floor's database of its own, on the server
// its admin connection is to.
type floorDatabase struct {
	admin *pgx.Conn
	name  string
	dsn   string
}

// newFloorDatabase creates a floor's database on the server serverURL
// names; drop it with drop.
func newFloorDatabase(ctx context.Context, serverURL string) (*floorDatabase, error) {
	name := "dispatch_floor_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	admin, dsn, err := newDatabase(ctx, serverURL, name)
	if err != nil {
		return nil, err
	}
	return &floorDatabase{admin: admin, name: name, dsn: dsn}, nil
}

// pids are the PostgreSQL processes the floor's CPU counts, as a run
// counts them (postgresPIDs).
func (db *floorDatabase) pids(ctx context.Context) ([]int, error) {
	return postgresPIDs(ctx, db.admin, db.name)
}

func (db *floorDatabase) drop() {
	bg := context.Background()
	_, _ = db.admin.Exec(bg, "DROP DATABASE IF EXISTS "+pgx.Identifier{db.name}.Sanitize()+" WITH (FORCE)")
	_ = db.admin.Close(bg)
}
