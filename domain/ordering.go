package domain

import "iter"

// FirstInLine reports whether d, a delivery of subscription s, is first in
// line (SPEC §3): nothing that precedes it holds it back, so it may be
// attempted. An unordered delivery is always first in line. An ordered one
// is held back only by its own subscription and key:
//
//   - by a delivery in deliveries of the same subscription and key for an
//     earlier event (smaller event id) that is not terminal, or
//   - by an event in unfanned (events whose fan-out is not recorded yet)
//     earlier than d's event that could get a delivery of s with d's key
//     once it is fanned out: it matches s's event types and resolves to
//     d's key under s's pointer (OrderingKeyFor).
//
// deliveries and unfanned may hold anything else, which holds nothing
// back: other subscriptions' deliveries, other keys, later events, d
// itself. An event settled as failed is fanned out, so it is not in
// unfanned. A zero s (the subscription is gone) lets no unfanned event
// hold d.
//
// This is the rule the memory store asks of what it holds. PostgreSQL's
// first_in_line (migration 00014) asks the same in SQL, exactly for the
// pointers outside data and conservatively (any key) for a pointer into
// data, which delays ordering but never breaks it.
func FirstInLine(d Delivery, s Subscription, deliveries iter.Seq[Delivery], unfanned iter.Seq[Event]) bool {
	if d.OrderingKey == "" {
		return true
	}
	for o := range deliveries {
		if o.SubscriptionID == d.SubscriptionID && o.OrderingKey == d.OrderingKey &&
			o.EventID < d.EventID && !o.Status.Terminal() {
			return false
		}
	}
	for e := range unfanned {
		if e.ID < d.EventID && s.mayPrecede(e, d.OrderingKey) {
			return false
		}
	}
	return true
}

// mayPrecede reports whether ev, an event not fanned out yet, could get a
// delivery of s with ordering key key once it is: then an ordered delivery
// of s with that key for a later event waits for it (FirstInLine). It could
// when it matches s's event types and resolves to key. Nothing else holds
// an ordered delivery back: another subscription's events, other keys,
// unordered deliveries, an event settled as failed (fanned out).
func (s Subscription) mayPrecede(ev Event, key string) bool {
	return key != "" && s.Matches(ev.Type) && OrderingKeyFor(s, ev) == key
}
