package loadtest

import (
	"strings"
	"testing"
)

func TestSummaryQuotesTheMedianOfEachCase(t *testing.T) {
	t.Parallel()
	ingest := func(perSecond float64) *Report {
		return &Report{Publish: PublishStats{PerSecond: perSecond, Latency: Latency{P99Ms: 20}},
			Memory: []ProcessMemory{{Name: "dispatch-load (api + scheduler in process)", PeakRSSBytes: 60 << 20}, {Name: "worker 1", PeakRSSBytes: 30 << 20}},
			CPU:    &CPUUse{Machine: 1.9, Other: 0.1}}
	}
	delivery := func(perSecond float64, lost int64) *Report {
		r := ingest(1000)
		r.Deliveries = &DeliveryStats{PerSecond: perSecond, SustainedPerSecond: perSecond, Lost: lost, AttemptsPerDelivery: 1,
			Latency: Latency{P50Ms: 3, P90Ms: 8, P99Ms: 21.5, MaxMs: 140}}
		return r
	}
	w1, _ := FindWorkload("W1")
	w3, _ := FindWorkload("W3")
	cases := []benchCase{{name: "W1", workload: w1}, {name: "W3", workload: w3}}
	results := [][]*Report{
		{ingest(14000), ingest(16000), ingest(15000)},
		{delivery(8000, 0), delivery(9000, 2), delivery(8500, 0)},
	}
	var b strings.Builder
	if err := writeSummary(&b, BenchOptions{Runs: 3, Command: "dispatch-load bench"}, cases, results); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	for _, want := range []string{
		"| W1 | 3 | 15,000 | 20.0 | – | – | – | – | – | 30 / 60 | 1.90 / 0.10 |",
		"| W3 | 3 | 1,000 | 20.0 | 8,500 (8,500) | 3.00 / 8.00 / 21.5 / 140 | 1.000 | 0 | 0 | 30 / 60 |",
		"Command: `dispatch-load bench`",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("summary lacks %q:\n%s", want, got)
		}
	}
}
