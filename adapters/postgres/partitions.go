package postgres

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// History is kept in time windows (migration 00018): events, deliveries
// and attempts are range-partitioned by id (attempts by delivery_id), and
// window [t0, t1) is the id range [domain.IDBound(t0), domain.IDBound(t1))
// in each, so everything about one event lives in one window of each
// table. A window's partitions are named after its start,
// <table>_p20060102t150405; the first, from MINVALUE to the migration's
// time, is <table>_legacy.
//
// MaintainHistory is the only writer of the partition layout, and it never
// holds a lock that stops delivery:
//
//   - A window is made as a plain table (CREATE TABLE … LIKE the parent,
//     with a CHECK of its bounds) then attached: ATTACH PARTITION takes
//     SHARE UPDATE EXCLUSIVE on the parent, which conflicts with no
//     SELECT, INSERT, UPDATE or DELETE (CREATE TABLE … PARTITION OF would
//     take ACCESS EXCLUSIVE).
//   - A window is removed with DETACH PARTITION … CONCURRENTLY (SHARE
//     UPDATE EXCLUSIVE on the parent; it waits for the transactions that
//     may see the partition rather than blocking new ones) then DROP TABLE
//     of the detached table, which nothing reads any more.
//   - Every statement runs with lock_timeout = maintenanceLockTimeout: a
//     maintenance statement that would queue behind a long transaction,
//     and so make hot statements queue behind it, gives up and is tried
//     again on the next call.
//
// A detach interrupted (a crash, a lock timeout in its second phase)
// leaves the partition "detach pending"; the next call finishes it
// (DETACH … FINALIZE). A table made but not attached, or detached but not
// dropped, is found by its name and attached or dropped.

// maintenanceLockKey is the advisory lock MaintainHistory holds: one
// replica maintains at a time ("dispatch" in ASCII, then 18).
const maintenanceLockKey int64 = 0x6469737061746318

// maintenanceLockTimeout bounds how long a maintenance statement waits for
// a lock before it gives up until the next call.
const maintenanceLockTimeout = "100ms"

// windowsAhead is how many windows past now MaintainHistory keeps made.
const windowsAhead = 2

// historyTable is one time-partitioned table.
type historyTable struct {
	name, key, prefix string
}

// historyTables in the order a window's partitions are detached and
// dropped: deliveries first, so that a window whose delivery came back to
// life meanwhile (a dead delivery retried) is found before anything of it
// is gone.
var historyTables = []historyTable{
	{name: "deliveries", key: "id", prefix: domain.DeliveryIDPrefix},
	{name: "attempts", key: "delivery_id", prefix: domain.DeliveryIDPrefix},
	{name: "events", key: "id", prefix: domain.EventIDPrefix},
}

// partitionPattern matches the names of the history tables' partitions.
const partitionPattern = `^(events|deliveries|attempts)_(legacy|p[0-9]{8}t[0-9]{6})$`

// windowNameFormat is the time layout of a window's name.
const windowNameFormat = "p20060102t150405"

// part is one table's partition of a window, attached or not.
type part struct {
	name          string
	attached      bool
	detachPending bool
}

// window is one time window and its partitions, by table name.
type window struct {
	suffix string
	// start is zero for the legacy window (from MINVALUE).
	start, end time.Time
	parts      map[string]*part
}

// MaintainHistory implements ports.Retention: under the maintenance
// advisory lock, it finishes what an interrupted call left, drops every
// window that ended before now - retention and holds nothing live, and
// makes windows of domain.RetentionWindow(retention) until windowsAhead
// windows past now. A window whose size changed with the retention starts
// where the last one ends. A lock timeout ends the call early without an
// error: the next call goes on.
//
// A window past the retention that holds a delivery not yet terminal, or
// an event not yet fanned out, waits whole; its rows never move to a
// later window (their ids, which place them, would change). The wait is
// bounded: a delivery's retry policy bounds its attempts.
func (s *Store) MaintainHistory(ctx context.Context, now time.Time, retention time.Duration) (ports.Maintenance, error) {
	if err := domain.ValidateRetention(retention); err != nil {
		return ports.Maintenance{}, err
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return ports.Maintenance{}, fmt.Errorf("maintain history: %w", err)
	}
	defer conn.Release()
	var locked bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", maintenanceLockKey).Scan(&locked); err != nil {
		return ports.Maintenance{}, fmt.Errorf("maintain history: take the lock: %w", err)
	}
	if !locked {
		return ports.Maintenance{Skipped: true}, nil
	}
	defer func() {
		ctx := context.WithoutCancel(ctx)
		_, _ = conn.Exec(ctx, "RESET lock_timeout", pgx.QueryExecModeSimpleProtocol)
		if _, err := conn.Exec(ctx, "SELECT pg_advisory_unlock($1)", maintenanceLockKey); err != nil {
			// The lock would stay with the pooled session: close it.
			_ = conn.Conn().Close(ctx)
		}
	}()
	started := time.Now()
	m := &maintenance{conn: conn.Conn(), now: now.UTC(), retention: retention}
	if _, err := m.conn.Exec(ctx, "SET lock_timeout = '"+maintenanceLockTimeout+"'", pgx.QueryExecModeSimpleProtocol); err != nil {
		return ports.Maintenance{}, fmt.Errorf("maintain history: %w", err)
	}
	err = m.run(ctx)
	m.done.Took = time.Since(started)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "55P03" { // lock_not_available
		m.done.LockTimedOut = true
		return m.done, nil
	}
	return m.done, err
}

// Partitions implements ports.Retention: the partitions attached to each
// history table.
func (s *Store) Partitions(ctx context.Context) (map[string]int, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT p.relname::text, count(i.inhrelid)::int
		FROM pg_class p LEFT JOIN pg_inherits i ON i.inhparent = p.oid
		WHERE p.relnamespace = current_schema()::regnamespace
		  AND p.relname IN ('events', 'deliveries', 'attempts')
		GROUP BY p.relname`)
	if err != nil {
		return nil, fmt.Errorf("partitions: %w", err)
	}
	counts := map[string]int{}
	var table string
	var n int
	_, err = pgx.ForEachRow(rows, []any{&table, &n}, func() error {
		counts[table] = n
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("partitions: %w", err)
	}
	return counts, nil
}

// maintenance is one MaintainHistory call, on the connection that holds
// the advisory lock.
type maintenance struct {
	conn      *pgx.Conn
	now       time.Time
	retention time.Duration
	done      ports.Maintenance
}

func (m *maintenance) run(ctx context.Context) error {
	windows, err := m.windows(ctx)
	if err != nil {
		return err
	}
	cutoff := m.now.Add(-m.retention)
	var lastEnd time.Time
	for _, w := range windows {
		lastEnd = w.end
		if !w.end.After(cutoff) {
			if err := m.drop(ctx, w); err != nil {
				return err
			}
			continue
		}
		if err := m.complete(ctx, w); err != nil {
			return err
		}
	}
	size := domain.RetentionWindow(m.retention)
	start := lastEnd
	if earliest := m.now.Add(-size).Truncate(time.Second); start.Before(earliest) {
		// Nothing is made at a time that far back: no window is needed
		// for the gap, and a long one would be made window by window.
		start = earliest
	}
	for until := m.now.Add(windowsAhead * size); start.Before(until); start = start.Add(size) {
		w := &window{suffix: start.Format(windowNameFormat), start: start, end: start.Add(size), parts: map[string]*part{}}
		if err := m.complete(ctx, w); err != nil {
			return err
		}
		m.done.Created++
	}
	return nil
}

// windows lists the history tables' partitions, attached or not, by
// window, oldest first.
func (m *maintenance) windows(ctx context.Context) ([]*window, error) {
	rows, err := m.conn.Query(ctx, `
		SELECT c.relname::text, i.inhrelid IS NOT NULL, coalesce(i.inhdetachpending, false),
		       coalesce(pg_get_expr(c.relpartbound, c.oid), ''),
		       coalesce((SELECT pg_get_constraintdef(k.oid) FROM pg_constraint k
		                 WHERE k.conrelid = c.oid AND k.conname = c.relname || '_bound'), '')
		FROM pg_class c LEFT JOIN pg_inherits i ON i.inhrelid = c.oid
		WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r'
		  AND c.relname ~ $1`, partitionPattern)
	if err != nil {
		return nil, fmt.Errorf("maintain history: list partitions: %w", err)
	}
	bySuffix := map[string]*window{}
	var name, bound, check string
	var attached, pending bool
	_, err = pgx.ForEachRow(rows, []any{&name, &attached, &pending, &bound, &check}, func() error {
		table, suffix, _ := strings.Cut(name, "_")
		start, end, err := parseBounds(table, bound, check)
		if err != nil {
			return fmt.Errorf("partition %s: %w", name, err)
		}
		w := bySuffix[suffix]
		if w == nil {
			w = &window{suffix: suffix, start: start, end: end, parts: map[string]*part{}}
			bySuffix[suffix] = w
		}
		w.parts[table] = &part{name: name, attached: attached, detachPending: pending}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("maintain history: %w", err)
	}
	windows := make([]*window, 0, len(bySuffix))
	for _, w := range bySuffix {
		windows = append(windows, w)
	}
	slices.SortFunc(windows, func(a, b *window) int { return a.start.Compare(b.start) })
	return windows, nil
}

// quoted finds the literals of a partition bound or a CHECK.
var quoted = regexp.MustCompile(`'([^']*)'`)

// parseBounds reads a partition's window from its partition bound when
// attached, else from its CHECK: one literal is an upper bound (the legacy
// window, from MINVALUE), two are both.
func parseBounds(table, bound, check string) (start, end time.Time, err error) {
	src := bound
	if src == "" {
		src = check
	}
	lits := quoted.FindAllStringSubmatch(src, -1)
	prefix := domain.EventIDPrefix
	if table != "events" {
		prefix = domain.DeliveryIDPrefix
	}
	switch len(lits) {
	case 1:
		end, err = domain.IDTime(prefix, lits[0][1])
	case 2:
		if start, err = domain.IDTime(prefix, lits[0][1]); err == nil {
			end, err = domain.IDTime(prefix, lits[1][1])
		}
	default:
		err = fmt.Errorf("no bounds in %q", src)
	}
	return start, end, err
}

// complete makes and attaches whatever partition of w is missing or
// detached.
func (m *maintenance) complete(ctx context.Context, w *window) error {
	for _, t := range historyTables {
		p := w.parts[t.name]
		if p == nil {
			p = &part{name: t.name + "_" + w.suffix}
			if err := m.create(ctx, t, p.name, w); err != nil {
				return err
			}
			w.parts[t.name] = p
		}
		if p.detachPending {
			if err := m.exec(ctx, fmt.Sprintf("ALTER TABLE %s DETACH PARTITION %s FINALIZE", t.name, p.name)); err != nil {
				return err
			}
			p.attached, p.detachPending = false, false
		}
		if !p.attached {
			if err := m.exec(ctx, fmt.Sprintf("ALTER TABLE %s ATTACH PARTITION %s FOR VALUES FROM (%s) TO (%s)",
				t.name, p.name, lowerBound(t, w), quote(domain.IDBound(t.prefix, w.end)))); err != nil {
				return err
			}
			p.attached = true
		}
	}
	return nil
}

func lowerBound(t historyTable, w *window) string {
	if w.start.IsZero() {
		return "MINVALUE"
	}
	return quote(domain.IDBound(t.prefix, w.start))
}

// create makes name, a partition of t for w, as a table of its own with
// its bounds checked, in one implicit transaction.
func (m *maintenance) create(ctx context.Context, t historyTable, name string, w *window) error {
	storage := ""
	if t.name == "deliveries" {
		storage = " WITH (fillfactor = 70)" // deliveries are updated in place (migration 00006)
	}
	return m.exec(ctx, fmt.Sprintf(
		"CREATE TABLE %[1]s (LIKE %[2]s INCLUDING DEFAULTS INCLUDING CONSTRAINTS)%[3]s; "+
			"ALTER TABLE %[1]s ADD CONSTRAINT %[1]s_bound CHECK (%[4]s >= %[5]s AND %[4]s < %[6]s)",
		name, t.name, storage, t.key, quote(domain.IDBound(t.prefix, w.start)), quote(domain.IDBound(t.prefix, w.end))))
}

// drop removes w unless it holds a live event or delivery: detach every
// partition, look again (a dead delivery may have been retried meanwhile),
// then drop them or, if something came back to life, attach them again.
func (m *maintenance) drop(ctx context.Context, w *window) error {
	live, err := m.live(ctx, w)
	if err != nil {
		return err
	}
	if live {
		m.done.Waiting++
		return m.complete(ctx, w)
	}
	for _, t := range historyTables {
		p := w.parts[t.name]
		if p == nil {
			continue
		}
		if p.detachPending {
			if err := m.exec(ctx, fmt.Sprintf("ALTER TABLE %s DETACH PARTITION %s FINALIZE", t.name, p.name)); err != nil {
				return err
			}
		} else if p.attached {
			if err := m.exec(ctx, fmt.Sprintf("ALTER TABLE %s DETACH PARTITION %s CONCURRENTLY", t.name, p.name)); err != nil {
				return err
			}
		}
		p.attached, p.detachPending = false, false
	}
	if live, err = m.live(ctx, w); err != nil {
		return err
	}
	if live {
		m.done.Waiting++
		return m.complete(ctx, w)
	}
	if err := m.freeKeys(ctx, w); err != nil {
		return err
	}
	names := make([]string, 0, len(w.parts))
	for _, p := range w.parts {
		names = append(names, p.name)
	}
	if err := m.exec(ctx, "DROP TABLE "+strings.Join(names, ", ")); err != nil {
		return err
	}
	m.done.Dropped++
	return nil
}

// freeKeys deletes the idempotency keys owned by w's events, which are
// about to go: a key whose event is gone is free even within its window
// (a retention shorter than DISPATCH_IDEMPOTENCY_WINDOW). An event's key
// was claimed at its creation, the time in its id, so created_at bounds
// the keys for their index (with a second's slack for a clock stepped
// back) and the id range picks exactly the window's.
func (m *maintenance) freeKeys(ctx context.Context, w *window) error {
	lower := ""
	if !w.start.IsZero() {
		lower = domain.IDBound(domain.EventIDPrefix, w.start)
	}
	_, err := m.conn.Exec(ctx, `DELETE FROM idempotency_keys
		WHERE created_at < $1 AND event_id >= $2 AND event_id < $3`,
		w.end.Add(time.Second), lower, domain.IDBound(domain.EventIDPrefix, w.end))
	if err != nil {
		return fmt.Errorf("maintain history: free the keys of window %s: %w", w.suffix, err)
	}
	return nil
}

// live reports whether w holds a delivery not yet terminal or an event not
// yet fanned out (both on partial indexes of the partitions).
func (m *maintenance) live(ctx context.Context, w *window) (bool, error) {
	var checks []string
	if p := w.parts["deliveries"]; p != nil {
		checks = append(checks, "EXISTS (SELECT 1 FROM "+p.name+" WHERE status IN ('pending', 'retrying', 'delivering'))")
	}
	if p := w.parts["events"]; p != nil {
		checks = append(checks, "EXISTS (SELECT 1 FROM "+p.name+" WHERE fanned_out_at IS NULL)")
	}
	if len(checks) == 0 {
		return false, nil
	}
	var live bool
	if err := m.conn.QueryRow(ctx, "SELECT "+strings.Join(checks, " OR "), pgx.QueryExecModeSimpleProtocol).Scan(&live); err != nil {
		return false, fmt.Errorf("maintain history: window %s: %w", w.suffix, err)
	}
	return live, nil
}

// exec runs one maintenance statement outside any transaction block
// (DETACH … CONCURRENTLY needs that).
func (m *maintenance) exec(ctx context.Context, sql string) error {
	if _, err := m.conn.Exec(ctx, sql, pgx.QueryExecModeSimpleProtocol); err != nil {
		return fmt.Errorf("maintain history: %s: %w", sql, err)
	}
	return nil
}

// quote makes an id a SQL literal; ids hold only [0-9A-Z_a-z].
func quote(id string) string { return "'" + id + "'" }
