package domain

import (
	"slices"
	"strings"
)

// Subscriber is what fan-out needs of a matching subscription to make its
// delivery: who it is and how its deliveries are ordered. A
// SubscriptionIndex keeps only this of each subscription, so that every
// process can hold the index of all of them (the rest is loaded when a
// delivery is attempted).
type Subscriber struct {
	ID string
	// OrderingKey is the subscription's ordering key pointer (empty when
	// unordered), as in Subscription.
	OrderingKey string
}

// Subscriber returns what a SubscriptionIndex keeps of s.
func (s Subscription) Subscriber() Subscriber {
	return Subscriber{ID: s.ID, OrderingKey: s.OrderingKey}
}

// SubscriptionIndex finds the active subscriptions whose event-type patterns
// match an event type by looking up the type, not by trying every
// subscription: exact patterns by the type, family patterns ("order.*") by
// each of the type's prefixes ending in a dot ("order.", "order.item."),
// and "*" in a list of its own. It agrees with Subscription.Matches.
//
// It is changed one subscription at a time (Put, Remove), so a copy kept
// up to date by changes costs what the changes cost, not what the whole set
// does. The zero value is not usable; use NewSubscriptionIndex. It is not
// safe for concurrent use: its owner serialises changes and lookups.
type SubscriptionIndex struct {
	byID map[string]*indexEntry
	// exact and family hold buckets sorted by id; family's keys end in the
	// dot before the pattern's "*".
	exact  map[string][]*indexEntry
	family map[string][]*indexEntry
	all    []*indexEntry
}

type indexEntry struct {
	Subscriber
	// patterns are the subscription's patterns, each once.
	patterns []string
}

// NewSubscriptionIndex returns an index of subs (those not active are left
// out).
func NewSubscriptionIndex(subs ...Subscription) *SubscriptionIndex {
	x := &SubscriptionIndex{
		byID:   make(map[string]*indexEntry, len(subs)),
		exact:  make(map[string][]*indexEntry),
		family: make(map[string][]*indexEntry),
	}
	for _, s := range subs {
		x.Put(s)
	}
	return x
}

// Len is the number of subscriptions in the index.
func (x *SubscriptionIndex) Len() int { return len(x.byID) }

// Lookup returns the indexed subscription id, if it is in the index.
func (x *SubscriptionIndex) Lookup(id string) (Subscriber, bool) {
	e, ok := x.byID[id]
	if !ok {
		return Subscriber{}, false
	}
	return e.Subscriber, true
}

// Put adds s to the index, or replaces the entry of its id: an active
// subscription is indexed by its patterns, an inactive one is removed.
func (x *SubscriptionIndex) Put(s Subscription) {
	if !s.Active {
		x.Remove(s.ID)
		return
	}
	patterns := distinct(s.EventTypes)
	if old, ok := x.byID[s.ID]; ok {
		if old.OrderingKey == s.OrderingKey && slices.Equal(old.patterns, patterns) {
			return
		}
		x.Remove(s.ID)
	}
	e := &indexEntry{Subscriber: s.Subscriber(), patterns: patterns}
	x.byID[s.ID] = e
	for _, p := range patterns {
		switch bucket, key := x.bucketOf(p); bucket {
		case nil:
			x.all = insertByID(x.all, e)
		default:
			bucket[key] = insertByID(bucket[key], e)
		}
	}
}

// Remove takes subscription id out of the index; an id not in it is
// ignored.
func (x *SubscriptionIndex) Remove(id string) {
	e, ok := x.byID[id]
	if !ok {
		return
	}
	delete(x.byID, id)
	for _, p := range e.patterns {
		switch bucket, key := x.bucketOf(p); bucket {
		case nil:
			x.all = removeByID(x.all, id)
		default:
			if rest := removeByID(bucket[key], id); len(rest) > 0 {
				bucket[key] = rest
			} else {
				delete(bucket, key)
			}
		}
	}
}

// bucketOf returns the map and key pattern p is indexed under, or a nil map
// for "*".
func (x *SubscriptionIndex) bucketOf(p string) (map[string][]*indexEntry, string) {
	if p == MatchAllTypes {
		return nil, ""
	}
	if prefix, ok := strings.CutSuffix(p, familySuffix); ok {
		return x.family, prefix + "."
	}
	return x.exact, p
}

// Match returns the indexed subscriptions that match eventType, each once,
// in id order.
func (x *SubscriptionIndex) Match(eventType string) []Subscriber {
	var buckets [][]*indexEntry
	add := func(b []*indexEntry) {
		if len(b) > 0 {
			buckets = append(buckets, b)
		}
	}
	add(x.exact[eventType])
	// Only a prefix shorter than the type can match ("order.*" does not
	// match "order."), which a valid type never ends with anyway.
	for i := 0; i < len(eventType)-1; i++ {
		if eventType[i] == '.' {
			add(x.family[eventType[:i+1]])
		}
	}
	add(x.all)
	n := 0
	for _, b := range buckets {
		n += len(b)
	}
	out := make([]Subscriber, 0, n)
	for _, b := range buckets {
		for _, e := range b {
			out = append(out, e.Subscriber)
		}
	}
	if len(buckets) > 1 {
		// A subscription with several matching patterns is in several
		// buckets; each bucket is in id order already.
		slices.SortFunc(out, func(a, b Subscriber) int { return strings.Compare(a.ID, b.ID) })
		out = slices.CompactFunc(out, func(a, b Subscriber) bool { return a.ID == b.ID })
	}
	return out
}

// distinct returns patterns without repeats, sorted.
func distinct(patterns []string) []string {
	out := slices.Clone(patterns)
	slices.Sort(out)
	return slices.Compact(out)
}

func compareEntry(e *indexEntry, id string) int { return strings.Compare(e.ID, id) }

// insertByID inserts e into bucket, kept in id order. Ids grow with their
// creation time, so a new subscription goes at the end.
func insertByID(bucket []*indexEntry, e *indexEntry) []*indexEntry {
	i, _ := slices.BinarySearchFunc(bucket, e.ID, compareEntry)
	return slices.Insert(bucket, i, e)
}

// removeByID removes the entry of id from bucket, kept in id order.
func removeByID(bucket []*indexEntry, id string) []*indexEntry {
	i, found := slices.BinarySearchFunc(bucket, id, compareEntry)
	if !found {
		return bucket
	}
	return slices.Delete(bucket, i, i+1)
}
