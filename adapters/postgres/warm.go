package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dispatch-webhooks/dispatch/adapters/postgres/sqlcgen"
)

// A process's first calls pay what later calls do not: a pool dials its
// connections on demand (a backend forked and authenticated, ~2–5 ms on a
// busy 2-core box), each connection prepares a statement the first time it
// runs it, and each backend loads the catalog entries of the tables the
// statement touches and makes its plan. The group-committed statements run
// one batch at a time behind each other, so every call arriving meanwhile
// waits for that too: right after a start, the first claims take tens of
// milliseconds instead of well under one, and the deliveries behind them
// wait as long. WarmIngest and WarmDeliveries do that work before the
// process takes traffic, so a deploy or a new replica does not show up in
// the latency.

// WarmIngest readies the Store for the API's publishes: it opens the
// connections the event group commit writes on, prepares its statement on
// each with an empty batch (which stores nothing), and loads the copy of the
// active subscriptions inline fan-out matches against.
func (s *Store) WarmIngest(ctx context.Context) error {
	if err := s.withSubscriptions(ctx, -1, func(int64, *subscriptionCopy) error { return nil }); err != nil {
		return fmt.Errorf("warm ingest: load subscriptions: %w", err)
	}
	err := onConnections(ctx, s.pool, eventWriters, func(q *sqlcgen.Queries) error {
		_, err := q.InsertEventsFannedOut(ctx, sqlcgen.InsertEventsFannedOutParams{SubscriptionVersion: -1})
		return err
	})
	if err != nil {
		return fmt.Errorf("warm ingest: %w", err)
	}
	return nil
}

// WarmDeliveries readies the Store for the worker's claims and outcomes:
// on every connection of the batch pool (BatchPool) it prepares
// ClaimDeliveries, RecordAttempts and ReleaseDeliveries with empty
// batches, which change nothing. Without a batch pool those statements are
// planned per batch anyway, and there is nothing to prepare.
func (s *Store) WarmDeliveries(ctx context.Context) error {
	if s.batchPool == nil {
		return nil
	}
	err := onConnections(ctx, s.batchPool, int(s.batchPool.Config().MaxConns), func(q *sqlcgen.Queries) error {
		_, claimErr := q.ClaimDeliveries(ctx, sqlcgen.ClaimDeliveriesParams{})
		_, recordErr := q.RecordAttempts(ctx, sqlcgen.RecordAttemptsParams{})
		_, releaseErr := q.ReleaseDeliveries(ctx, sqlcgen.ReleaseDeliveriesParams{})
		return errors.Join(claimErr, recordErr, releaseErr)
	})
	if err != nil {
		return fmt.Errorf("warm deliveries: %w", err)
	}
	return nil
}

// WarmFanOut readies the Store for the fan-out stage: it opens a
// connection of the pool for each of the handlers fan-out calls a worker
// runs at once, with the stage's reads (GetEvents, and SubscriptionVersion
// and SubscriptionsChangedSince, which bring its copy of the subscriptions
// up to date) prepared and their backends' catalogs loaded. The stage's insert
// (FanOut) is planned with each batch's values, so there is nothing to
// prepare for it. Without this, the first events fanned out after a start
// wait for the dials and the preparing.
func (s *Store) WarmFanOut(ctx context.Context, handlers int) error {
	err := onConnections(ctx, s.pool, handlers, func(q *sqlcgen.Queries) error {
		_, eventsErr := q.GetEvents(ctx, []string{})
		_, versionErr := q.SubscriptionVersion(ctx)
		_, changesErr := q.SubscriptionsChangedSince(ctx, sqlcgen.SubscriptionsChangedSinceParams{Since: math.MaxInt64, MaxRows: 1})
		return errors.Join(eventsErr, versionErr, changesErr)
	})
	if err != nil {
		return fmt.Errorf("warm fan-out: %w", err)
	}
	return nil
}

// onConnections runs warm on n distinct connections of pool (fewer if the
// pool holds fewer), opened at once. Each is held until all are warm, so
// that none is handed out twice.
func onConnections(ctx context.Context, pool *pgxpool.Pool, n int, warm func(q *sqlcgen.Queries) error) error {
	n = min(n, int(pool.Config().MaxConns))
	conns := make([]*pgxpool.Conn, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			c, err := pool.Acquire(ctx)
			if err != nil {
				errs[i] = fmt.Errorf("open connection: %w", err)
				return
			}
			conns[i] = c
			errs[i] = warm(sqlcgen.New(c))
		})
	}
	wg.Wait()
	for _, c := range conns {
		if c != nil {
			c.Release()
		}
	}
	return errors.Join(errs...)
}
