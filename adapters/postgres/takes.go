package postgres

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// A fresh delivery's entry tells what its creator stored (see
// ports.DeliveryClaims.TakeDelivery), and until its reservation ends
// nobody but the entry's holder changes the row, so a take need not read
// it: what the attempt needs besides is its subscription, from the copy of
// the active subscriptions that inline fan-out keeps (subscriptionCopy),
// and its event, which never changes once stored, from recentEvents. A
// batch of takes therefore costs one small read: the change counter of
// subscriptions, so that a change committed before the take is seen, and
// the events not at hand (EventsToTake). Before, each take read its
// delivery, event and subscription rows in ClaimDeliveries' join.
//
// A take is left to ClaimDeliveries, which reads the row, when its entry
// tells too little (an entry of an earlier version, or of a delivery not
// reserved: an ordered one, whose line only the row tells), its subscription is
// not in the copy of the active ones (disabled or deleted: the row read
// tells which) or not decoded whole there (the copy keeps a bounded number
// of subscriptions whole; the claim's row read puts it there), or the reservation does not outlast an attempt (the take
// then claims, as ClaimDeliveries decides).

// recentEventsBytes bounds the payloads recentEvents holds in each of its
// two generations. A fan-out's deliveries of one event are appended
// together and taken within moments of one another, so a few megabytes
// spare all but the first of them reading the event.
const recentEventsBytes = 4 << 20

// recentEvents holds the events takes read lately: a generation fills up
// to recentEventsBytes of payload, then becomes the previous one and the
// one before it is dropped.
type recentEvents struct {
	mu       sync.Mutex
	current  map[string]domain.Event
	previous map[string]domain.Event
	bytes    int
}

func (r *recentEvents) get(id string) (domain.Event, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.current[id]; ok {
		return e, true
	}
	e, ok := r.previous[id]
	return e, ok
}

func (r *recentEvents) put(e domain.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.current == nil || r.bytes+len(e.Data) > recentEventsBytes {
		r.previous, r.current, r.bytes = r.current, make(map[string]domain.Event), 0
	}
	r.current[e.ID] = e
	r.bytes += len(e.Data)
}

// takeUnread answers the calls of batch that are takes it can answer
// without reading their rows (see above), and returns the indexes of the
// others, for ClaimDeliveries. When its read fails it answers none.
func (s *Store) takeUnread(ctx context.Context, batch []*claimCall) (left []int) {
	var takes []int
	for i, c := range batch {
		if !c.fresh || c.entry.EventID == "" || c.entry.ReservedUntil.IsZero() || c.entry.OrderingKey != "" {
			left = append(left, i)
			continue
		}
		takes = append(takes, i)
	}
	if len(takes) == 0 {
		return left // plain claims: nothing to look up
	}
	var missing []string
	events := make(map[string]domain.Event)
	asked := make(map[string]bool)
	for _, i := range takes {
		id := batch[i].entry.EventID
		if asked[id] {
			continue
		}
		asked[id] = true
		if e, ok := s.recent.get(id); ok {
			events[id] = e
		} else {
			missing = append(missing, id)
		}
	}
	version, err := s.eventsToTake(ctx, missing, events)
	if err != nil {
		return allOf(batch)
	}
	err = s.withSubscriptions(ctx, version, func(_ int64, subs *subscriptionCopy) error {
		for _, i := range takes {
			c := batch[i]
			e, found := events[c.entry.EventID]
			sub, atHand := subs.forTake(c.entry.SubscriptionID)
			if !found || !atHand {
				left = append(left, i)
				continue
			}
			// What ClaimDeliveries compares, at its precision.
			lease := c.now.Truncate(time.Microsecond).Add(sub.Timeout + c.leaseMargin)
			if c.entry.ReservedUntil.Before(lease) {
				left = append(left, i)
				continue
			}
			d := c.entry
			d.ReservedUntil = time.Time{} // stores never return it
			c.taken = &ports.Claimed{Delivery: d, Event: e, Subscription: sub}
		}
		return nil
	})
	if err != nil {
		return allOf(batch)
	}
	slices.Sort(left)
	return left
}

// eventsToTake reads the events ids into events, and returns the change
// counter of subscriptions, read in the same snapshot.
func (s *Store) eventsToTake(ctx context.Context, ids []string, events map[string]domain.Event) (int64, error) {
	if len(ids) == 0 {
		return s.batch.SubscriptionVersion(ctx)
	}
	rows, err := s.batch.EventsToTake(ctx, ids)
	if err != nil {
		return 0, err
	}
	if len(rows) == 0 {
		return s.batch.SubscriptionVersion(ctx)
	}
	for _, row := range rows {
		e := claimedEvent(row.Event)
		s.recent.put(e)
		events[e.ID] = e
	}
	return rows[0].SubscriptionVersion, nil
}

func allOf(batch []*claimCall) []int {
	all := make([]int, len(batch))
	for i := range all {
		all[i] = i
	}
	return all
}
