package postgres

import (
	"context"
	"fmt"
	"sync"

	"github.com/dispatch-webhooks/dispatch/adapters/postgres/sqlcgen"
	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// subscriptionPage is how many subscription rows SubscriptionChanges
// reads and decodes at once.
const subscriptionPage = 500

// SubscriptionChanges implements ports.SubscriptionStore. The change
// counter is read first, so the rows read after it are at least as new as
// it says (migration 00016); rows are read a page at a time, each page in
// its own snapshot, which the contract allows: a row read twice is put
// twice, and one deleted meanwhile is among the deletions next time.
func (s *Store) SubscriptionChanges(ctx context.Context, since int64, changed func([]domain.Subscription)) (ports.SubscriptionChanges, error) {
	return s.subscriptionChanges(ctx, since, func(rows []sqlcgen.Subscription) error {
		subs, err := toSubscriptions(s.ring, rows)
		if err != nil {
			return err
		}
		changed(subs)
		return nil
	})
}

// MatchActive implements ports.SubscriptionStore with the copy inline
// fan-out and takes use: the change counter read first tells how new the
// copy must be.
func (s *Store) MatchActive(ctx context.Context, match func(*domain.SubscriptionIndex)) error {
	version, err := s.queries.SubscriptionVersion(ctx)
	if err != nil {
		return fmt.Errorf("match active subscriptions: %w", interpretError(err))
	}
	return s.withSubscriptions(ctx, version, func(_ int64, c *subscriptionCopy) error {
		match(c.index)
		return nil
	})
}

// subscriptionChanges is SubscriptionChanges with the rows undecoded.
func (s *Store) subscriptionChanges(ctx context.Context, since int64, changed func([]sqlcgen.Subscription) error) (ports.SubscriptionChanges, error) {
	version, err := s.queries.SubscriptionVersion(ctx)
	if err != nil {
		return ports.SubscriptionChanges{}, fmt.Errorf("subscription changes: %w", interpretError(err))
	}
	out := ports.SubscriptionChanges{Cursor: version}
	if version == since {
		return out, nil
	}
	for after, afterVersion := "", since; ; {
		var rows []sqlcgen.Subscription
		if since == 0 {
			rows, err = s.queries.ActiveSubscriptionsPage(ctx, sqlcgen.ActiveSubscriptionsPageParams{After: after, MaxRows: subscriptionPage})
		} else {
			rows, err = s.queries.SubscriptionsChangedSince(ctx, sqlcgen.SubscriptionsChangedSinceParams{
				Since: since, AfterVersion: afterVersion, AfterID: after, MaxRows: subscriptionPage,
			})
		}
		if err != nil {
			return out, fmt.Errorf("subscription changes since %d: %w", since, interpretError(err))
		}
		if len(rows) > 0 {
			if err := changed(rows); err != nil {
				return out, fmt.Errorf("subscription changes since %d: %w", since, err)
			}
			last := rows[len(rows)-1]
			after, afterVersion = last.ID, last.Version
		}
		if len(rows) < subscriptionPage {
			break
		}
	}
	if since != 0 {
		if out.Deleted, err = s.queries.SubscriptionsDeletedSince(ctx, since); err != nil {
			return out, fmt.Errorf("subscriptions deleted since %d: %w", since, interpretError(err))
		}
	}
	return out, nil
}

// maxTakeSubscriptions bounds the decoded subscriptions subscriptionCopy
// keeps for takes. Past it a take whose subscription is not at hand is
// left to a claim, which reads the row (and puts it at hand).
const maxTakeSubscriptions = 10_000

// subscriptionCopy is the process's copy of the active subscriptions, kept
// up to date by changes (SubscriptionChanges): the index inline fan-out
// and the fan-out stage (MatchActive) match events against, the version
// of each active row, and, for takes, a bounded number of the
// subscriptions decoded whole. Only the index and
// the versions cover every active subscription, so that a process holds
// 100,000 of them in a few tens of MiB.
type subscriptionCopy struct {
	// refreshing serialises the loads of changes, so that two never apply
	// out of order; mu guards the rest, and is not held while loading.
	refreshing sync.Mutex
	mu         sync.RWMutex
	loaded     bool
	// version is the change counter the copy is up to date at.
	version int64
	index   *domain.SubscriptionIndex
	// rows holds the version of each active subscription's row.
	rows map[string]int64
	// whole holds decoded subscriptions, each with its row's version;
	// one whose version is not rows' is out of date.
	whole map[string]versionedSubscription
}

type versionedSubscription struct {
	version int64
	sub     domain.Subscription
}

// withSubscriptions brings the copy up to at least minVersion (a negative
// one: loaded, however old), and calls fn with it and the version it is up to
// date at; fn must not keep the copy's parts past its return. The copy may
// hold some later changes too (see SubscriptionChanges), which a counter
// read in a statement then shows as moved on.
func (s *Store) withSubscriptions(ctx context.Context, minVersion int64, fn func(version int64, c *subscriptionCopy) error) error {
	c := &s.subscriptions
	c.mu.RLock()
	if c.loaded && c.version >= minVersion {
		defer c.mu.RUnlock()
		return fn(c.version, c)
	}
	c.mu.RUnlock()
	if err := s.refreshSubscriptions(ctx, minVersion); err != nil {
		return err
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	return fn(c.version, c)
}

// refreshSubscriptions applies the changes since the copy's version, unless
// another call brought it to minVersion meanwhile.
func (s *Store) refreshSubscriptions(ctx context.Context, minVersion int64) error {
	c := &s.subscriptions
	c.refreshing.Lock()
	defer c.refreshing.Unlock()
	c.mu.RLock()
	loaded, since := c.loaded, c.version
	c.mu.RUnlock()
	if loaded && since >= minVersion {
		return nil
	}
	if !loaded {
		since = 0
		c.mu.Lock()
		c.index, c.rows, c.whole = domain.NewSubscriptionIndex(), map[string]int64{}, map[string]versionedSubscription{}
		c.mu.Unlock()
	}
	changes, err := s.subscriptionChanges(ctx, since, func(rows []sqlcgen.Subscription) error {
		subs, err := toSubscriptions(s.ring, rows)
		if err != nil {
			return err
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		for i, sub := range subs {
			c.put(rows[i].Version, sub)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("load subscriptions: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range changes.Deleted {
		c.remove(id)
	}
	c.loaded, c.version = true, changes.Cursor
	return nil
}

// put puts sub, read from a row at version, into the copy; c.mu is held.
func (c *subscriptionCopy) put(version int64, sub domain.Subscription) {
	if !sub.Active {
		c.remove(sub.ID)
		return
	}
	c.index.Put(sub)
	c.rows[sub.ID] = version
	c.remember(version, sub)
}

// remove takes subscription id out of the copy; c.mu is held.
func (c *subscriptionCopy) remove(id string) {
	c.index.Remove(id)
	delete(c.rows, id)
	delete(c.whole, id)
}

// remember keeps sub, read from a row at version, for takes, unless as
// many are kept already; c.mu is held.
func (c *subscriptionCopy) remember(version int64, sub domain.Subscription) {
	if _, ok := c.whole[sub.ID]; ok || len(c.whole) < maxTakeSubscriptions {
		c.whole[sub.ID] = versionedSubscription{version: version, sub: sub}
	}
}

// rememberClaimed keeps the subscription a claim read, for later takes,
// when it is the version the copy has of it.
func (c *subscriptionCopy) rememberClaimed(version int64, sub domain.Subscription) {
	c.mu.RLock()
	current, ok := c.rows[sub.ID]
	_, kept := c.whole[sub.ID]
	c.mu.RUnlock()
	if !ok || current != version || kept {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rows[sub.ID] == version {
		c.remember(version, sub)
	}
}

// forTake returns active subscription id as its row is now in the copy,
// when it is at hand; c.mu is held.
func (c *subscriptionCopy) forTake(id string) (domain.Subscription, bool) {
	version, ok := c.rows[id]
	if !ok {
		return domain.Subscription{}, false
	}
	w, ok := c.whole[id]
	if !ok || w.version != version {
		return domain.Subscription{}, false
	}
	return w.sub, true
}
