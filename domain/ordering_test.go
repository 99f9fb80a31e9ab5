package domain_test

import (
	"slices"
	"testing"

	"github.com/dispatch-webhooks/dispatch/domain"
)

func TestFirstInLine(t *testing.T) {
	t.Parallel()
	sub := domain.Subscription{ID: "sub_a", EventTypes: []string{"order.*"}, OrderingKey: "/data/customer"}
	d := domain.Delivery{ID: "dlv_5", EventID: "evt_5", SubscriptionID: "sub_a", Status: domain.DeliveryPending, OrderingKey: "c1"}
	// before is a delivery of d's subscription and key for an earlier
	// event, with status st.
	before := func(st domain.DeliveryStatus) domain.Delivery {
		return domain.Delivery{ID: "dlv_3", EventID: "evt_3", SubscriptionID: "sub_a", Status: st, OrderingKey: "c1"}
	}
	with := func(o domain.Delivery, change func(*domain.Delivery)) domain.Delivery {
		change(&o)
		return o
	}
	unordered := with(d, func(x *domain.Delivery) { x.OrderingKey = "" })
	// unfanned is an event not fanned out yet, earlier than d's, of a type
	// sub matches and with d's key.
	unfanned := domain.Event{ID: "evt_4", Type: "order.created", Data: []byte(`{"customer":"c1"}`)}
	withEvent := func(change func(*domain.Event)) domain.Event {
		e := unfanned
		change(&e)
		return e
	}
	tests := []struct {
		name       string
		d          domain.Delivery
		sub        domain.Subscription
		deliveries []domain.Delivery
		unfanned   []domain.Event
		want       bool
	}{
		{"nothing precedes it", d, sub, nil, nil, true},
		{"only itself", d, sub, []domain.Delivery{d}, nil, true},
		{"an earlier one pending", d, sub, []domain.Delivery{before(domain.DeliveryPending)}, nil, false},
		{"an earlier one retrying", d, sub, []domain.Delivery{before(domain.DeliveryRetrying)}, nil, false},
		{"an earlier one delivering", d, sub, []domain.Delivery{before(domain.DeliveryDelivering)}, nil, false},
		{"an earlier one delivered", d, sub, []domain.Delivery{before(domain.DeliveryDelivered)}, nil, true},
		{"an earlier one dead", d, sub, []domain.Delivery{before(domain.DeliveryDead)}, nil, true},
		{"an earlier one of these terminal, one not", d, sub, []domain.Delivery{before(domain.DeliveryDead), with(before(domain.DeliveryPending), func(x *domain.Delivery) { x.EventID = "evt_1" })}, nil, false},
		{"a later one pending", d, sub, []domain.Delivery{with(before(domain.DeliveryPending), func(x *domain.Delivery) { x.EventID = "evt_7" })}, nil, true},
		{"an earlier one of another key", d, sub, []domain.Delivery{with(before(domain.DeliveryPending), func(x *domain.Delivery) { x.OrderingKey = "c2" })}, nil, true},
		{"an earlier unordered one", d, sub, []domain.Delivery{with(before(domain.DeliveryPending), func(x *domain.Delivery) { x.OrderingKey = "" })}, nil, true},
		{"an earlier one of another subscription", d, sub, []domain.Delivery{with(before(domain.DeliveryPending), func(x *domain.Delivery) { x.SubscriptionID = "sub_b" })}, nil, true},
		{"unordered, behind an earlier unordered one", unordered, sub, []domain.Delivery{with(before(domain.DeliveryPending), func(x *domain.Delivery) { x.OrderingKey = "" })}, []domain.Event{unfanned}, true},
		{"an earlier event awaits fan-out", d, sub, nil, []domain.Event{unfanned}, false},
		{"an earlier event of another key awaits fan-out", d, sub, nil, []domain.Event{withEvent(func(e *domain.Event) { e.Data = []byte(`{"customer":"c2"}`) })}, true},
		{"an earlier event of a type not matched awaits fan-out", d, sub, nil, []domain.Event{withEvent(func(e *domain.Event) { e.Type = "invoice.paid" })}, true},
		{"a later event awaits fan-out", d, sub, nil, []domain.Event{withEvent(func(e *domain.Event) { e.ID = "evt_6" })}, true},
		{"its own event awaits fan-out", d, sub, nil, []domain.Event{withEvent(func(e *domain.Event) { e.ID = d.EventID })}, true},
		{"an earlier event awaits fan-out, the subscription is gone", d, domain.Subscription{}, nil, []domain.Event{unfanned}, true},
		{"an earlier event with the key by its own ordering key", with(d, func(x *domain.Delivery) { x.OrderingKey = "k1" }), domain.Subscription{ID: "sub_a", EventTypes: []string{"*"}, OrderingKey: "/ordering_key"}, nil, []domain.Event{withEvent(func(e *domain.Event) { e.OrderingKey = "k1" })}, false},
		{"terminal before, nothing awaiting fan-out but later events", d, sub, []domain.Delivery{before(domain.DeliveryDelivered), d}, []domain.Event{withEvent(func(e *domain.Event) { e.ID = "evt_9" })}, true},
	}
	for _, tt := range tests {
		got := domain.FirstInLine(tt.d, tt.sub, slices.Values(tt.deliveries), slices.Values(tt.unfanned))
		if got != tt.want {
			t.Errorf("%s: FirstInLine = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestMayPrecede(t *testing.T) {
	t.Parallel()
	byData := domain.Subscription{EventTypes: []string{"order.*"}, OrderingKey: "/data/customer"}
	byKey := domain.Subscription{EventTypes: []string{"order.*"}, OrderingKey: "/ordering_key"}
	ev := domain.Event{Type: "order.created", OrderingKey: "k1", Data: []byte(`{"customer":"c1"}`)}
	other := ev
	other.Type = "invoice.paid"
	tests := []struct {
		name string
		sub  domain.Subscription
		ev   domain.Event
		key  string
		want bool
	}{
		{"same type and data key", byData, ev, "c1", true},
		{"another data key", byData, ev, "c2", false},
		{"same event key", byKey, ev, "k1", true},
		{"another event key", byKey, ev, "c1", false},
		{"a type the subscription does not match", byData, other, "c1", false},
		{"an unordered delivery", byData, ev, "", false},
		{"an unordered subscription", domain.Subscription{EventTypes: []string{"*"}}, ev, "c1", false},
	}
	for _, tt := range tests {
		if got := tt.sub.MayPrecede(tt.ev, tt.key); got != tt.want {
			t.Errorf("%s: MayPrecede = %v, want %v", tt.name, got, tt.want)
		}
	}
}
