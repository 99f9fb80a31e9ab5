package metrics_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dispatch-webhooks/dispatch/adapters/metrics"
	"github.com/dispatch-webhooks/dispatch/adapters/metrics/metricstest"
	"github.com/dispatch-webhooks/dispatch/domain"
)

// newMetrics registers Dispatch's collectors on a registry of their own.
func newMetrics() (*prometheus.Registry, *metrics.Metrics) {
	reg := prometheus.NewRegistry()
	return reg, metrics.New(reg)
}

func TestGauges(t *testing.T) {
	t.Parallel()
	reg, m := newMetrics()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m.Backlog(map[domain.DeliveryStatus]int64{domain.DeliveryPending: 3, domain.DeliveryRetrying: 2, domain.DeliveryDelivering: 1, domain.DeliveryDead: 7})
	m.StreamLag("deliveries", 42)
	m.TableUsage("attempts", 1200, 5<<20)
	m.Partitions("deliveries", 5)
	m.Circuit("sub_a", domain.Breaker{Phase: domain.BreakerOpen, OpenUntil: now.Add(time.Minute)}, now)
	m.Circuit("sub_b", domain.Breaker{Phase: domain.BreakerOpen, OpenUntil: now.Add(time.Second)}, now)
	if got := metricstest.Value(t, reg, "dispatch_circuits_open"); got != 2 {
		t.Errorf("circuits open = %v, want 2", got)
	}
	// sub_b's open period ends; sub_a is still open.
	m.Circuit("sub_a", domain.Breaker{Phase: domain.BreakerOpen, OpenUntil: now.Add(time.Minute)}, now.Add(2*time.Second))
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"dispatch_pending_deliveries", nil, 6},
		{"dispatch_dead_letters", nil, 7},
		{"dispatch_stream_lag", []string{"stream", "deliveries"}, 42},
		{"dispatch_retained_rows", []string{"table", "attempts"}, 1200},
		{"dispatch_table_bytes", []string{"table", "attempts"}, 5 << 20},
		{"dispatch_partitions", []string{"table", "deliveries"}, 5},
		{"dispatch_circuits_open", nil, 1},
	} {
		if got := metricstest.Value(t, reg, c.name, c.labels...); got != c.want {
			t.Errorf("%s = %v, want %v", c.name, got, c.want)
		}
	}
	m.Circuit("sub_a", domain.Breaker{Phase: domain.BreakerClosed}, now.Add(3*time.Second))
	if got := metricstest.Value(t, reg, "dispatch_circuits_open"); got != 0 {
		t.Errorf("circuits open after the last one closed = %v, want 0", got)
	}
}

func TestFanOutHeldAddsUp(t *testing.T) {
	t.Parallel()
	reg, m := newMetrics()
	m.FanOutHeld(1500 * time.Millisecond)
	m.FanOutHeld(250 * time.Millisecond)
	if got := metricstest.Value(t, reg, "dispatch_fanout_held_seconds_total"); got != 1.75 {
		t.Errorf("held = %v s, want 1.75", got)
	}
}

func TestFanOutFailuresCount(t *testing.T) {
	t.Parallel()
	reg, m := newMetrics()
	m.FanOutFailed()
	m.FanOutFailed()
	if got := metricstest.Value(t, reg, "dispatch_fanout_failures_total"); got != 2 {
		t.Errorf("fan-out failures = %v, want 2", got)
	}
}
