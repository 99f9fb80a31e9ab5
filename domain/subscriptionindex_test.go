package domain_test

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-webhooks/dispatch/domain"
)

// indexed makes an active subscription with id and patterns.
func indexed(id string, patterns ...string) domain.Subscription {
	return domain.Subscription{ID: id, EventTypes: patterns, Active: true}
}

func ids(subs []domain.Subscriber) []string {
	out := make([]string, len(subs))
	for i, s := range subs {
		out[i] = s.ID
	}
	return out
}

func TestSubscriptionIndexMatch(t *testing.T) {
	t.Parallel()
	x := domain.NewSubscriptionIndex(
		indexed("sub_05", "order.created"),
		indexed("sub_01", "order.*"),
		indexed("sub_09", "*"),
		indexed("sub_03", "order.item.*", "order.*"), // in two buckets, matched once
		indexed("sub_02", "invoice.paid", "order.item.added"),
		indexed("sub_07", "orders.*"),
		indexed("sub_04", "order"),
		indexed("sub_06", "order.created", "order.created"),
		domain.Subscription{ID: "sub_08", EventTypes: []string{"*"}}, // inactive
	)
	tests := []struct {
		eventType string
		want      []string
	}{
		{"order.created", []string{"sub_01", "sub_03", "sub_05", "sub_06", "sub_09"}},
		{"order.item.added", []string{"sub_01", "sub_02", "sub_03", "sub_09"}},
		{"order.item", []string{"sub_01", "sub_03", "sub_09"}},
		{"order", []string{"sub_04", "sub_09"}},
		{"orders.x", []string{"sub_07", "sub_09"}},
		{"invoice.paid", []string{"sub_02", "sub_09"}},
		{"Order.created", []string{"sub_09"}}, // case-sensitive
		{"other", []string{"sub_09"}},
	}
	for _, tt := range tests {
		t.Run(tt.eventType, func(t *testing.T) {
			t.Parallel()
			if got := ids(x.Match(tt.eventType)); !slices.Equal(got, tt.want) {
				t.Errorf("Match(%q) = %v, want %v", tt.eventType, got, tt.want)
			}
		})
	}
	if x.Len() != 8 {
		t.Errorf("Len() = %d, want 8 (the inactive one left out)", x.Len())
	}
}

func TestSubscriptionIndexFollowsChanges(t *testing.T) {
	t.Parallel()
	x := domain.NewSubscriptionIndex(indexed("sub_1", "order.*"), indexed("sub_2", "*"))
	check := func(eventType string, want ...string) {
		t.Helper()
		if got := ids(x.Match(eventType)); !slices.Equal(got, want) {
			t.Errorf("Match(%q) = %v, want %v", eventType, got, want)
		}
	}
	check("order.created", "sub_1", "sub_2")

	x.Put(indexed("sub_1", "invoice.paid")) // patterns changed
	check("order.created", "sub_2")
	check("invoice.paid", "sub_1", "sub_2")

	ordered := indexed("sub_1", "invoice.paid")
	ordered.OrderingKey = "/data/customer_id"
	x.Put(ordered) // only the ordering key changed
	if got := x.Match("invoice.paid"); got[0] != (domain.Subscriber{ID: "sub_1", OrderingKey: "/data/customer_id"}) {
		t.Errorf("Match after a new ordering key = %+v", got)
	}

	disabled := indexed("sub_2", "*")
	disabled.Active = false
	x.Put(disabled)
	check("invoice.paid", "sub_1")
	x.Remove("sub_1")
	x.Remove("sub_unknown")
	check("invoice.paid")
	if x.Len() != 0 {
		t.Errorf("Len() = %d after removing everything", x.Len())
	}
	if _, ok := x.Lookup("sub_1"); ok {
		t.Error("Lookup finds a removed subscription")
	}
}

// FuzzSubscriptionIndexAgreesWithMatches applies random changes to an
// index and to a plain map of subscriptions, and checks that the index
// matches random event types exactly as Subscription.Matches does, in id
// order.
func FuzzSubscriptionIndexAgreesWithMatches(f *testing.F) {
	f.Add(uint64(1), uint8(10), uint8(20))
	f.Add(uint64(42), uint8(200), uint8(50))
	f.Add(uint64(7), uint8(3), uint8(255))
	f.Fuzz(func(t *testing.T, seed uint64, subs, changes uint8) {
		rng := rand.New(rand.NewPCG(seed, seed>>32))
		segments := []string{"a", "b", "c", "ab"}
		eventType := func() string {
			parts := make([]string, 1+rng.IntN(3))
			for i := range parts {
				parts[i] = segments[rng.IntN(len(segments))]
			}
			return strings.Join(parts, ".")
		}
		pattern := func() string {
			switch rng.IntN(6) {
			case 0:
				return "*"
			case 1, 2:
				return eventType() + ".*"
			default:
				return eventType()
			}
		}
		subscription := func(id string) domain.Subscription {
			s := domain.Subscription{ID: id, Active: rng.IntN(5) > 0}
			for range 1 + rng.IntN(3) {
				s.EventTypes = append(s.EventTypes, pattern())
			}
			return s
		}
		model := map[string]domain.Subscription{}
		x := domain.NewSubscriptionIndex()
		ids := make([]string, 1+int(subs))
		for i := range ids {
			ids[i] = fmt.Sprintf("sub_%03d", i)
		}
		for range int(subs) + int(changes) {
			id := ids[rng.IntN(len(ids))]
			if rng.IntN(4) == 0 {
				delete(model, id)
				x.Remove(id)
				continue
			}
			s := subscription(id)
			model[id] = s
			x.Put(s)
		}
		active := 0
		for _, s := range model {
			if s.Active {
				active++
			}
		}
		if x.Len() != active {
			t.Fatalf("Len() = %d, want %d", x.Len(), active)
		}
		for range 50 {
			et := eventType()
			var want []string
			for _, id := range ids {
				if s, ok := model[id]; ok && s.Active && s.Matches(et) {
					want = append(want, id)
				}
			}
			if got := domainIDs(x.Match(et)); !slices.Equal(got, want) {
				t.Fatalf("Match(%q) = %v, want %v", et, got, want)
			}
		}
	})
}

func domainIDs(subs []domain.Subscriber) []string {
	if len(subs) == 0 {
		return nil
	}
	return ids(subs)
}

// manySubscriptions makes n active subscriptions as an API would: fresh
// ids, each with two exact types of its own and a family pattern shared
// with a tenth of the others; every tenth is ordered.
func manySubscriptions(n int) []domain.Subscription {
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	subs := make([]domain.Subscription, n)
	for i := range subs {
		subs[i] = domain.Subscription{
			ID:         domain.MustNewID(domain.SubscriptionIDPrefix, now),
			EventTypes: []string{fmt.Sprintf("tenant%d.order.created", i), fmt.Sprintf("tenant%d.invoice.paid", i), fmt.Sprintf("family%d.*", i%10)},
			Active:     true,
		}
		if i%10 == 0 {
			subs[i].OrderingKey = "/data/customer_id"
		}
	}
	return subs
}

// TestSubscriptionIndexOf100000FitsTheBudget checks that the index of
// 100,000 subscriptions takes a small part of a process's 200 MiB.
func TestSubscriptionIndexOf100000FitsTheBudget(t *testing.T) {
	// Not parallel: it measures the heap.
	const n, budget = 100_000, 64 << 20
	before := heapInUse()
	subs := manySubscriptions(n)
	x := domain.NewSubscriptionIndex(subs...)
	// subs is not used again: what stays reachable is what the index keeps.
	after := heapInUse()
	if x.Len() != n {
		t.Fatalf("Len() = %d, want %d", x.Len(), n)
	}
	grown := int64(after) - int64(before)
	t.Logf("index of %d subscriptions: %.1f MiB", n, float64(grown)/(1<<20))
	if grown > budget {
		t.Errorf("index of %d subscriptions takes %.1f MiB of heap, want under %d MiB", n, float64(grown)/(1<<20), budget>>20)
	}
	runtime.KeepAlive(x)
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// BenchmarkMatch matches events against 100,000 subscriptions, each event
// matching 10 of them.
func BenchmarkMatch(b *testing.B) {
	subs := manySubscriptions(100_000)
	for i := range 10 {
		subs[i*9_000].EventTypes = append(subs[i*9_000].EventTypes, "order.created")
	}
	x := domain.NewSubscriptionIndex(subs...)
	b.ReportAllocs()
	for b.Loop() {
		if got := x.Match("order.created"); len(got) != 10 {
			b.Fatalf("matched %d, want 10", len(got))
		}
	}
}
