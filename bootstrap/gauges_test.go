package bootstrap_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"

	"github.com/dispatch-webhooks/dispatch/bootstrap"
)

// TestSchedulerExportsWhatEachTableKeeps: the scheduler's gauges tell how
// many rows and bytes events, deliveries and attempts keep.
func TestSchedulerExportsWhatEachTableKeeps(t *testing.T) {
	t.Parallel()
	c := newCluster(t, nil)
	var reg *prometheus.Registry
	c.start(bootstrap.RoleScheduler, fx.Populate(&reg))

	want := map[string]bool{"dispatch_retained_rows": true, "dispatch_table_bytes": true}
	deadline := time.Now().Add(10 * time.Second)
	for {
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		tables := map[string]map[string]float64{}
		for _, f := range families {
			if !want[f.GetName()] {
				continue
			}
			tables[f.GetName()] = map[string]float64{}
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "table" {
						tables[f.GetName()][l.GetValue()] = m.GetGauge().GetValue()
					}
				}
			}
		}
		bytes := tables["dispatch_table_bytes"]
		if len(tables["dispatch_retained_rows"]) == 3 && len(bytes) == 3 && bytes["events"] > 0 && bytes["deliveries"] > 0 && bytes["attempts"] > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("storage gauges after 10s: %v", tables)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
