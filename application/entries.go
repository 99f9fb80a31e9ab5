package application

import (
	"strconv"
	"strings"
	"time"

	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// A delivery stream entry's body is a delivery id. The entry a delivery's
// creator appends right after storing it (ingest's inline fan-out, the
// fan-out stage) is marked fresh: the delivery was stored reserved to
// whoever holds that entry (domain.Delivery.ReservedUntil), and the queue
// hands an entry to one consumer, so its holder takes the delivery
// (ports.DeliveryClaims.TakeDelivery) instead of claiming it: one
// statement's write and commit fewer per delivery. Every other entry for a
// delivery (the scheduler's scan, a retry, the next in line, a reclaimed
// entry appended again) is plain, and its holder claims.
//
// A fresh entry also carries what its creator stored that an attempt
// needs and the delivery's row would otherwise be read for: its event,
// its subscription, when it was created and until when it is reserved.
// The store may then take it without reading it (see TakeDelivery):
//
//	<delivery id> fresh <event id> <subscription id> <created µs> <reserved µs>
//
// with both times in microseconds since the Unix epoch. An entry that ends
// after the mark (as before entries carried more) is still fresh; its
// holder's store reads what it does not tell.

// freshMark follows the delivery id in a fresh entry. Ids never contain a
// space.
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

// A delivery's entry is keyed by its subscription (ports.Entry.Key), an
// event's by the event.

// eventEntry returns the entry of event id.
func eventEntry(id string) ports.Entry {
	return ports.Entry{Key: id, Body: id}
}

// eventEntries returns the entries of events ids.
func eventEntries(ids []string) []ports.Entry {
	entries := make([]ports.Entry, len(ids))
	for i, id := range ids {
		entries[i] = eventEntry(id)
	}
	return entries
}

// plainEntries returns the plain entries of deliveries ids of subscription
// sub.
func plainEntries(sub string, ids ...string) []ports.Entry {
	entries := make([]ports.Entry, len(ids))
	for i, id := range ids {
		entries[i] = ports.Entry{Key: sub, Body: id}
	}
	return entries
}

// freshEntries returns the fresh entries for the new deliveries ds.
func freshEntries(ds []domain.Delivery) []ports.Entry {
	entries := make([]ports.Entry, len(ds))
	for i, d := range ds {
		entries[i].Key = d.SubscriptionID
		if d.EventID == "" || d.ReservedUntil.IsZero() {
			// Not reserved (ordered), or not known: its holder's store
			// reads it.
			entries[i].Body = d.ID + freshMark
			continue
		}
		b := make([]byte, 0, len(d.ID)+len(freshMark)+len(d.EventID)+len(d.SubscriptionID)+36)
		b = append(b, d.ID...)
		b = append(b, freshMark...)
		b = append(b, ' ')
		b = append(b, d.EventID...)
		b = append(b, ' ')
		b = append(b, d.SubscriptionID...)
		b = append(b, ' ')
		b = strconv.AppendInt(b, d.CreatedAt.UnixMicro(), 10)
		b = append(b, ' ')
		b = strconv.AppendInt(b, d.ReservedUntil.UnixMicro(), 10)
		entries[i].Body = string(b)
	}
	return entries
}

// DeliveryEntry reads a delivery stream entry's body: the delivery's id,
// and whether the entry is its creator's (fresh).
func DeliveryEntry(body string) (id string, fresh bool) {
	id, rest, found := strings.Cut(body, " ")
	if found && (rest == freshMark[1:] || strings.HasPrefix(rest, freshMark[1:]+" ")) {
		return id, true
	}
	return body, false
}

// freshDelivery returns the delivery a fresh entry's body tells of, as
// its creator stored it (see ports.DeliveryClaims.TakeDelivery): its id
// alone when the entry tells no more, or tells it malformed.
func freshDelivery(body string) domain.Delivery {
	id, rest, _ := strings.Cut(body, freshMark)
	d := domain.Delivery{ID: id, Status: domain.DeliveryPending}
	// Four fields, each after one space (strings.Fields would allocate).
	rest, ok := strings.CutPrefix(rest, " ")
	if !ok {
		return d
	}
	var fields [4]string
	for i := range 3 {
		var found bool
		if fields[i], rest, found = strings.Cut(rest, " "); !found || fields[i] == "" {
			return d
		}
	}
	if rest == "" || strings.Contains(rest, " ") {
		return d
	}
	fields[3] = rest
	created, err1 := strconv.ParseInt(fields[2], 10, 64)
	reserved, err2 := strconv.ParseInt(fields[3], 10, 64)
	if err1 != nil || err2 != nil || reserved == (time.Time{}).UnixMicro() {
		return d // freshEntries writes no zero reservation
	}
	d.EventID, d.SubscriptionID = fields[0], fields[1]
	d.CreatedAt = time.UnixMicro(created).UTC()
	d.NextAttemptAt, d.UpdatedAt = d.CreatedAt, d.CreatedAt
	d.ReservedUntil = time.UnixMicro(reserved).UTC()
	return d
}

// plainEntry returns body without a fresh mark: what an entry becomes when
// it is appended again by anyone but the delivery's creator.
func plainEntry(body string) string {
	id, _ := DeliveryEntry(body)
	return id
}
