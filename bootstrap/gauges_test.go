package bootstrap_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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

	// The scheduler exports them as its gauge loop starts.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		families, err := reg.Gather()
		require.NoError(c, err)
		tables := map[string]map[string]float64{}
		for _, f := range families {
			if f.GetName() != "dispatch_retained_rows" && f.GetName() != "dispatch_table_bytes" && f.GetName() != "dispatch_partitions" {
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
		assert.Len(c, tables["dispatch_retained_rows"], 3, "rows of events, deliveries and attempts")
		for _, table := range []string{"events", "deliveries", "attempts"} {
			assert.Positive(c, tables["dispatch_table_bytes"][table], "bytes of %s", table)
			// The legacy partition and the windows made on start.
			assert.GreaterOrEqual(c, tables["dispatch_partitions"][table], 3.0, "partitions of %s", table)
		}
	}, 10*time.Second, 50*time.Millisecond)
}
