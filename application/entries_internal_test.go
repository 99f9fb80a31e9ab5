package application

import (
	"strings"
	"testing"
	"time"

	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

func TestAFreshEntryTellsTheDeliveryAsStored(t *testing.T) {
	now := time.Date(2026, 11, 25, 2, 30, 0, 123456789, time.UTC)
	e := domain.Event{ID: domain.MustNewID(domain.EventIDPrefix, now), Type: "order.created", CreatedAt: now}
	sub := domain.Subscription{ID: domain.MustNewID(domain.SubscriptionIDPrefix, now), EventTypes: []string{"*"}, Active: true}
	made, _ := deliveriesOf(e, domain.NewSubscriptionIndex(sub), now, 0, 30*time.Second)
	d := made[0]

	entry := freshEntries(made)[0]
	if entry.Key != d.SubscriptionID {
		t.Errorf("a fresh entry's key is %q, want its subscription %q", entry.Key, d.SubscriptionID)
	}
	body := entry.Body
	if id, fresh := DeliveryEntry(body); id != d.ID || !fresh {
		t.Fatalf("DeliveryEntry(%q) = %q, %v; want %q, fresh", body, id, fresh, d.ID)
	}
	if got := freshDelivery(body); got != d {
		t.Errorf("freshDelivery(%q) =\n %+v, want the delivery as made\n %+v", body, got, d)
	}
	if got := plainEntry(body); got != d.ID {
		t.Errorf("plainEntry(%q) = %q, want %q", body, got, d.ID)
	}
}

func TestDeliveryEntries(t *testing.T) {
	const id = "dlv_01KJ0000000000000000000000"
	created := time.UnixMicro(1795000000000000).UTC()
	told := domain.Delivery{
		ID: id, EventID: "evt_1", SubscriptionID: "sub_1", Status: domain.DeliveryPending,
		NextAttemptAt: created, CreatedAt: created, UpdatedAt: created,
		ReservedUntil: created.Add(30 * time.Second),
	}
	idOnly := domain.Delivery{ID: id, Status: domain.DeliveryPending}
	for _, tc := range []struct {
		name  string
		body  string
		id    string
		fresh bool
		told  domain.Delivery // what a fresh entry tells
	}{
		{"plain", id, id, false, domain.Delivery{}},
		{"fresh", id + " fresh evt_1 sub_1 1795000000000000 1795000030000000", id, true, told},
		{"fresh, telling only the id", id + " fresh", id, true, idOnly},
		{"fresh, times malformed", id + " fresh evt_1 sub_1 soon later", id, true, idOnly},
		{"fresh, a field missing", id + " fresh evt_1 1795000000000000 1795000030000000", id, true, idOnly},
		{"fresh, a field too many", id + " fresh evt_1 sub_1 1 2 3", id, true, idOnly},
		{"fresh, reserved at the zero time", id + " fresh evt_1 sub_1 1 -62135596800000000", id, true, idOnly},
		{"another mark: not an id", id + " stale", id + " stale", false, domain.Delivery{}},
		{"a mark that only starts like it", id + " freshly", id + " freshly", false, domain.Delivery{}},
		{"empty", "", "", false, domain.Delivery{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gotID, fresh := DeliveryEntry(tc.body)
			if gotID != tc.id || fresh != tc.fresh {
				t.Fatalf("DeliveryEntry(%q) = %q, %v; want %q, %v", tc.body, gotID, fresh, tc.id, tc.fresh)
			}
			if !fresh {
				return
			}
			if got := freshDelivery(tc.body); got != tc.told {
				t.Errorf("freshDelivery(%q) =\n %+v, want\n %+v", tc.body, got, tc.told)
			}
		})
	}
}

func TestAnUnreservedDeliveryIsFreshByIdAlone(t *testing.T) {
	// Ordered: claimed in line, so its entry tells nothing to take it by.
	d := domain.Delivery{ID: "dlv_1", EventID: "evt_1", SubscriptionID: "sub_1", OrderingKey: "k", CreatedAt: time.Now()}
	if got := freshEntries([]domain.Delivery{d})[0]; got != (ports.Entry{Key: "sub_1", Body: "dlv_1 fresh"}) {
		t.Errorf("entry = %+v, want dlv_1 fresh keyed by sub_1", got)
	}
}

func FuzzDeliveryEntry(f *testing.F) {
	f.Add("dlv_1")
	f.Add("dlv_1 fresh")
	f.Add("dlv_1 fresh evt_1 sub_1 1795000000000000 1795000030000000")
	f.Add("dlv_1 fresh evt_1 sub_1 -1 9223372036854775807")
	f.Add("dlv_1 fresh evt_1 sub_1 1 -62135596800000000")
	f.Fuzz(func(t *testing.T, body string) {
		id, fresh := DeliveryEntry(body)
		if !fresh {
			if id != body {
				t.Fatalf("a plain entry's id is its body: %q from %q", id, body)
			}
			return
		}
		if strings.Contains(id, " ") || !strings.HasPrefix(body, id+freshMark) {
			t.Fatalf("fresh entry %q read as id %q", body, id)
		}
		d := freshDelivery(body)
		if d.ID != id || d.Status != domain.DeliveryPending {
			t.Fatalf("freshDelivery(%q) = %+v, want id %q, pending", body, d, id)
		}
		if d.EventID == "" {
			return
		}
		// What it tells, it tells again.
		if again := freshDelivery(freshEntries([]domain.Delivery{d})[0].Body); again != d {
			t.Fatalf("entry of %+v reads back as %+v", d, again)
		}
	})
}
