package metrics_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dispatch-webhooks/dispatch/adapters/metrics"
	"github.com/dispatch-webhooks/dispatch/domain"
)

// gauge reads one gauge (with the given label value, if any) from reg.
func gauge(t *testing.T, reg *prometheus.Registry, name, label string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if label == "" || (len(m.GetLabel()) > 0 && m.GetLabel()[0].GetValue() == label) {
				return m.GetGauge().GetValue()
			}
		}
	}
	t.Fatalf("%s{%s} not exported", name, label)
	return 0
}

func TestGauges(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m.Backlog(map[domain.DeliveryStatus]int64{domain.DeliveryPending: 3, domain.DeliveryRetrying: 2, domain.DeliveryDelivering: 1, domain.DeliveryDead: 7})
	m.StreamLag("deliveries", 42)
	m.Circuit("sub_a", domain.Breaker{Phase: domain.BreakerOpen, OpenUntil: now.Add(time.Minute)}, now)
	m.Circuit("sub_b", domain.Breaker{Phase: domain.BreakerOpen, OpenUntil: now.Add(time.Second)}, now)
	if got := gauge(t, reg, "dispatch_circuits_open", ""); got != 2 {
		t.Errorf("circuits open = %v, want 2", got)
	}
	// sub_b's open period ends; sub_a is still open.
	m.Circuit("sub_a", domain.Breaker{Phase: domain.BreakerOpen, OpenUntil: now.Add(time.Minute)}, now.Add(2*time.Second))
	for _, c := range []struct {
		name, label string
		want        float64
	}{
		{"dispatch_pending_deliveries", "", 6},
		{"dispatch_dead_letters", "", 7},
		{"dispatch_stream_lag", "deliveries", 42},
		{"dispatch_circuits_open", "", 1},
	} {
		if got := gauge(t, reg, c.name, c.label); got != c.want {
			t.Errorf("%s = %v, want %v", c.name, got, c.want)
		}
	}
	m.Circuit("sub_a", domain.Breaker{Phase: domain.BreakerClosed}, now.Add(3*time.Second))
	if got := gauge(t, reg, "dispatch_circuits_open", ""); got != 0 {
		t.Errorf("circuits open after the last one closed = %v, want 0", got)
	}
}

func TestFanOutHeldAddsUp(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	m.FanOutHeld(1500 * time.Millisecond)
	m.FanOutHeld(250 * time.Millisecond)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "dispatch_fanout_held_seconds_total" {
			if got := f.GetMetric()[0].GetCounter().GetValue(); got != 1.75 {
				t.Errorf("held = %v s, want 1.75", got)
			}
			return
		}
	}
	t.Fatal("dispatch_fanout_held_seconds_total not exported")
}
