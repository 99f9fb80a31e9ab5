package application

import "strings"

// A delivery stream entry's body is a delivery id. The entry a delivery's
// creator appends right after storing it (ingest's inline fan-out, the
// fan-out stage) is marked fresh: the delivery was stored reserved to
// whoever holds that entry (domain.Delivery.ReservedUntil), and the queue
// hands an entry to one consumer, so its holder takes the delivery
// (ports.DeliveryStore.TakeDelivery) instead of claiming it: one
// statement's write and commit fewer per delivery. Every other entry for a
// delivery (the scheduler's scan, a retry, the next in line, a reclaimed
// entry appended again) is plain, and its holder claims.

// freshMark ends the body of a fresh entry. Ids never contain a space.
const freshMark = " fresh"

// A new delivery is reserved to the holder of its creator's entry for the
// visibility timeout (visibilityTimeout), after which the scheduler
// appends a delivery whose entry was lost again, and reclaims an entry
// whose holder went quiet, so a lost append or a dead holder is made up no
// later than without it. The holder attempts the delivery without a claim only if the
// reservation outlasts the attempt (the subscription's timeout plus
// leaseMargin: 15 s to spare at the defaults); an entry that waited longer
// in the queue, or a visibility timeout too short for an attempt, makes it
// claim.

// freshEntries returns the fresh entries' bodies for new deliveries ids.
func freshEntries(ids []string) []string {
	bodies := make([]string, len(ids))
	for i, id := range ids {
		bodies[i] = id + freshMark
	}
	return bodies
}

// DeliveryEntry reads a delivery stream entry's body: the delivery's id,
// and whether the entry is its creator's (fresh).
func DeliveryEntry(body string) (id string, fresh bool) {
	id, fresh = strings.CutSuffix(body, freshMark)
	return id, fresh
}

// plainEntry returns body without a fresh mark: what an entry becomes when
// it is appended again by anyone but the delivery's creator.
func plainEntry(body string) string {
	id, _ := DeliveryEntry(body)
	return id
}
