package loadtest

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dispatch-webhooks/dispatch/adapters/postgres"
	"github.com/dispatch-webhooks/dispatch/application"
	"github.com/dispatch-webhooks/dispatch/domain"
)

// Names of the figures the ceilings are computed from.
const (
	limitHTTP          = "loopback HTTP requests/s"
	limitWebhookHTTP   = "loopback HTTP requests/s, webhook path"
	limitBareInsert    = "PostgreSQL rows/s in 500-row INSERTs"
	limitBareDeliver   = "PostgreSQL deliveries/s, bare minimum: claimed, recorded, attempt stored"
	limitStorePublish0 = "Dispatch's store alone: events published/s, no subscription"
	limitStorePublish1 = "Dispatch's store alone: events published/s, one subscription"
	limitStoreDeliver  = "Dispatch's store alone: deliveries taken and recorded/s"
)

const (
	storePublishers = 256 // W3's publishers
	storeDeliverers = 512 // twice a worker's concurrency, so that every batch is full
	// storeDeliverPerSec and bareDeliverPerSec are more deliveries per
	// second than the store's and the bare delivery probe manage here:
	// how many deliveries they are given to consume. A probe that runs
	// out anyway ends early, its figure still per second of its run.
	storeDeliverPerSec = 20_000
	bareDeliverPerSec  = 150_000
)

// probeStore measures the PostgreSQL work Dispatch itself does, alone on
// the machine: its schema, statements, connection pools and group commits,
// driven through the store's own methods by enough goroutines to keep
// every batch full. Publishing is the API's write (an event, and with one
// subscription its delivery made inline, committed synchronously); a
// delivery is the worker's take of it (fresh, so no claim is written) and
// its recorded success (committed asynchronously, as the worker's pool
// does). What these cost the machine
// is a floor under the workloads that do them, whatever the rest costs.
func probeStore(ctx context.Context, o LimitsOptions) ([]Limit, error) {
	dsn, drop, err := scratchDatabase(ctx, o)
	if err != nil {
		return nil, err
	}
	defer drop()
	api, closeAPI, err := openStore(ctx, dsn)
	if err != nil {
		return nil, err
	}
	defer closeAPI()
	worker, closeWorker, err := openStore(ctx, dsn, postgres.AsyncCommits())
	if err != nil {
		return nil, err
	}
	defer closeWorker()

	data := []byte(`{"pad":"` + strings.Repeat("x", max(0, o.Payload-10)) + `"}`)
	var (
		mu  sync.Mutex
		ids []domain.Delivery // what each fresh entry would tell
	)
	publish := func(ctx context.Context) (int, error) {
		e, err := domain.NewEvent(domain.NewEventInput{Type: "order.created", Source: "dispatch-load", Data: data, DataChecked: true}, time.Now())
		if err != nil {
			return 0, err
		}
		var made []domain.Delivery
		stored, _, err := api.CreateEventFannedOut(ctx, e, func(e domain.Event, active *domain.SubscriptionIndex) ([]domain.Delivery, bool) {
			made, _ = inlineToAll(e, active)
			return made, true
		})
		if err != nil {
			return 0, err
		}
		if len(stored) != len(made) {
			return 0, fmt.Errorf("stored %d deliveries of %d made", len(stored), len(made))
		}
		mu.Lock()
		ids = append(ids, made...)
		mu.Unlock()
		return 1, nil
	}
	bare, err := hammer(ctx, storePublishers, o.Duration, publish)
	if err != nil {
		return nil, fmt.Errorf("publish: %w", err)
	}
	bare.Name = limitStorePublish0
	bare.Notes = fmt.Sprintf("%d publishers, %d B events, synchronous commits", storePublishers, o.Payload)

	sub, err := domain.NewSubscription(domain.NewSubscriptionInput{URL: "https://hooks.example.com/limits", EventTypes: []string{"*"}}, time.Now())
	if err != nil {
		return nil, err
	}
	if err := api.CreateSubscription(ctx, sub); err != nil {
		return nil, fmt.Errorf("create subscription: %w", err)
	}
	one, err := hammer(ctx, storePublishers, o.Duration, publish)
	if err != nil {
		return nil, fmt.Errorf("publish: %w", err)
	}
	one.Name = limitStorePublish1
	one.Notes = fmt.Sprintf("%d publishers, %d B events, the delivery made inline, synchronous commits", storePublishers, o.Payload)

	// Enough deliveries that claiming does not run out first (unmeasured).
	want := int(o.Duration.Seconds()*storeDeliverPerSec) + storeDeliverers
	if _, err := hammer(ctx, storePublishers, time.Hour, func(ctx context.Context) (int, error) {
		mu.Lock()
		enough := len(ids) >= want
		mu.Unlock()
		if enough {
			return 0, errProbeDone
		}
		return publish(ctx)
	}); err != nil {
		return nil, fmt.Errorf("publish: %w", err)
	}

	var next atomic.Int64
	deliver, err := hammer(ctx, storeDeliverers, o.Duration, func(ctx context.Context) (int, error) {
		i := int(next.Add(1) - 1)
		if i >= len(ids) {
			return 0, errProbeDone
		}
		now := time.Now()
		c, err := worker.TakeDelivery(ctx, ids[i], now, workerLeaseMargin)
		if err != nil {
			return 0, fmt.Errorf("take: %w", err)
		}
		done := c.Delivery
		done.Attempts, done.Status, done.LastStatusCode, done.UpdatedAt = 1, domain.DeliveryDelivered, 200, now
		a := domain.Attempt{DeliveryID: done.ID, Number: 1, StatusCode: 200, ResponseBody: "ok", Duration: time.Millisecond, CreatedAt: now}
		if _, err := worker.RecordAttempt(ctx, done, a); err != nil {
			return 0, fmt.Errorf("record: %w", err)
		}
		return 1, nil
	})
	if err != nil {
		return nil, fmt.Errorf("deliver: %w", err)
	}
	deliver.Name = limitStoreDeliver
	deliver.Notes = fmt.Sprintf("%d goroutines, a fresh delivery taken then a recorded 200, asynchronous commits", storeDeliverers)
	return []Limit{bare, one, deliver}, nil
}

// workerLeaseMargin is the worker's lease margin (application's
// leaseMargin), with which a delivery reserved for the default visibility
// timeout is taken for 15 s after its creation.
const workerLeaseMargin = 5 * time.Second

// inlineToAll fans an event out to every active subscription, reserving
// each delivery as ingest does.
func inlineToAll(e domain.Event, active *domain.SubscriptionIndex) ([]domain.Delivery, bool) {
	matched := active.Match(e.Type)
	out := make([]domain.Delivery, len(matched))
	for i, s := range matched {
		out[i] = domain.NewDeliveryTo(e, s, e.CreatedAt)
		out[i].ReservedUntil = e.CreatedAt.Add(application.DefaultVisibilityTimeout)
	}
	return out, true
}

// openStore opens a store on dsn with the two pools a role uses, migrated.
func openStore(ctx context.Context, dsn string, opts ...postgres.ConnectOption) (*postgres.Store, func(), error) {
	pool, err := postgres.Connect(ctx, dsn, opts...)
	if err != nil {
		return nil, nil, err
	}
	if err := postgres.Migrate(ctx, pool); err != nil {
		pool.Close()
		return nil, nil, err
	}
	var batch *pgxpool.Pool
	if batch, err = postgres.ConnectBatches(ctx, dsn, opts...); err != nil {
		pool.Close()
		return nil, nil, err
	}
	return postgres.New(pool, postgres.BatchPool(batch)), func() { batch.Close(); pool.Close() }, nil
}

// writeCeilings prints what the measured figures allow each workload at
// most on this machine: the machine time of the steps a workload cannot
// skip, summed per event or delivery, into the machine's cores. Everything
// else (Redis, the roles' own work, the load generator beyond its HTTP
// exchange) is left out, so the true ceiling is lower. The bare minimum
// stores W3's event and delivery at the price of two 1 KiB rows.
func writeCeilings(w io.Writer, limits []Limit, cores float64) error {
	cost := map[string]time.Duration{}
	for _, l := range limits {
		cost[l.Name] = l.MachineTime()
	}
	// A publish and a webhook are both an exchange with fasthttp's server
	// (the API's, the receiver's) from a lean client (the generator's, the
	// worker's sender): the webhook path's probe measures one.
	exchange := cost[limitWebhookHTTP]
	bare, one, deliver := cost[limitStorePublish0], cost[limitStorePublish1], cost[limitStoreDeliver]
	row, bareDeliver := cost[limitBareInsert], cost[limitBareDeliver]
	if exchange == 0 || bare == 0 || one == 0 || deliver == 0 || row == 0 || bareDeliver == 0 {
		_, err := io.WriteString(w, "\nNo ceilings: the machine's busy time could not be read.\n")
		return err
	}
	ceiling := func(per time.Duration) string {
		return fmt.Sprintf("%s/s (%.0f µs)", thousands(int64(cores/per.Seconds()+0.5)), float64(per)/float64(time.Microsecond))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nCeilings on %.0f cores (machine time of the steps each workload cannot skip, summed; "+
		"Redis and the roles' own work left out, so the true ceilings are lower):\n\n", cores)
	fmt.Fprintf(&b, "| workload | steps | with Dispatch's store (per item) | with the bare minimum (per item) | target |\n|---|---|---:|---:|---:|\n")
	fmt.Fprintf(&b, "| W1 | publish exchange + event stored | %s | %s | 15,000/s |\n", ceiling(exchange+bare), ceiling(exchange+row))
	fmt.Fprintf(&b, "| W3 | publish exchange + event and delivery stored + take and record + webhook exchange | %s | %s | 8,000/s |\n",
		ceiling(2*exchange+one+deliver), ceiling(2*exchange+2*row+bareDeliver))
	fmt.Fprintf(&b, "| W4 | take and record + webhook exchange (fan-out's insert left out) | %s | %s | 15,000/s |\n",
		ceiling(exchange+deliver), ceiling(exchange+bareDeliver))
	_, err := io.WriteString(w, b.String())
	return err
}

// probeBareDeliveries measures the least PostgreSQL work any design that
// keeps a delivery's state and its attempts must do per delivery, in full
// batches: mark 500 rows taken (the claim), then mark them done and insert
// their 500 attempt rows (the record), each a statement of its own
// committed asynchronously, on tables with nothing but primary keys: no
// secondary index, no foreign key, no event or subscription to read.
func probeBareDeliveries(ctx context.Context, pool *pgxpool.Pool, o LimitsOptions) (Limit, error) {
	const batch, writers = 500, 2
	rows := int64(o.Duration.Seconds()*bareDeliverPerSec) + writers*batch
	for _, q := range []string{
		`CREATE TABLE bare_deliveries (id bigint PRIMARY KEY, status text NOT NULL, attempts integer NOT NULL,
			lease_until timestamptz, updated_at timestamptz NOT NULL)`,
		`CREATE TABLE bare_attempts (delivery_id bigint, attempt integer, status_code integer,
			created_at timestamptz NOT NULL, PRIMARY KEY (delivery_id, attempt))`,
		fmt.Sprintf(`INSERT INTO bare_deliveries SELECT i, 'pending', 0, NULL, now() FROM generate_series(1, %d) i`, rows),
		`VACUUM ANALYZE bare_deliveries`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			return Limit{}, err
		}
	}
	var next atomic.Int64
	l, err := hammer(ctx, writers, o.Duration, func(ctx context.Context) (int, error) {
		first := next.Add(batch) - batch + 1
		if first+batch-1 > rows {
			return 0, errProbeDone
		}
		ids := make([]int64, batch)
		for i := range ids {
			ids[i] = first + int64(i)
		}
		for _, q := range []string{
			`UPDATE bare_deliveries SET lease_until = now() + interval '1 minute', updated_at = now() WHERE id = ANY($1)`,
			`WITH done AS (
				UPDATE bare_deliveries SET status = 'delivered', attempts = 1, lease_until = NULL, updated_at = now()
				WHERE id = ANY($1) RETURNING id
			) INSERT INTO bare_attempts SELECT id, 1, 200, now() FROM done`,
		} {
			tx, err := pool.Begin(ctx)
			if err != nil {
				return 0, err
			}
			if _, err := tx.Exec(ctx, "SET LOCAL synchronous_commit = off"); err != nil {
				_ = tx.Rollback(ctx)
				return 0, err
			}
			if _, err := tx.Exec(ctx, q, ids); err != nil {
				_ = tx.Rollback(ctx)
				return 0, err
			}
			if err := tx.Commit(ctx); err != nil {
				return 0, err
			}
		}
		return batch, nil
	})
	l.Name = limitBareDeliver
	l.Notes = fmt.Sprintf("%d writers, 500-row claim, then record with its attempts, primary keys only, asynchronous commits", writers)
	return l, err
}
