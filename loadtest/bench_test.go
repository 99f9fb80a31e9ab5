package loadtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestSummaryQuotesTheMedianOfEachCase(t *testing.T) {
	t.Parallel()
	ingest := func(perSecond float64) *Report {
		return &Report{Publish: PublishStats{PerSecond: perSecond, Latency: Latency{P99Ms: 20}},
			Memory: []ProcessMemory{{Name: "dispatch-load (api + scheduler in process)", PeakRSSBytes: 60 << 20}, {Name: "worker 1", PeakRSSBytes: 30 << 20}},
			CPU:    &CPUUse{Machine: 1.9, Other: 0.1, PerEventMs: 0.25, WithTool: true}}
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
	summaryHas(t, got,
		"| W1 | 3 | 15,000 | 20.0 | – | – | – | – | – | 30 / 60 | 1.90 / 0.10 | 0.250* |",
		"| W3 | 3 | 1,000 | 20.0 | 8,500 (8,500) | 3.00 / 8.00 / 21.5 / 140 | 1.000 | 0 | 0 | 30 / 60 |",
		"Command: `dispatch-load bench`",
	)
}

// summaryHas fails t for each of wants that summary lacks.
func summaryHas(t *testing.T, summary string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(summary, want) {
			t.Errorf("summary lacks %q:\n%s", want, summary)
		}
	}
}

// TestBenchReportsAFailedRunAndWritesTheSummary checks that a run that
// fails (here at once: no PostgreSQL listens where it is sent) is
// reported and the summary is still written.
func TestBenchReportsAFailedRunAndWritesTheSummary(t *testing.T) {
	t.Parallel()
	base := baseConfig()
	base.DatabaseURL, base.DispatchBin = "postgres://postgres@127.0.0.1:1/postgres?connect_timeout=5", "/nonexistent/dispatch"
	opts := BenchOptions{Out: t.TempDir(), Runs: 1, Only: []string{"W1"}, Quick: true, Base: base}
	err := Bench(context.Background(), opts)
	if err == nil || !strings.Contains(err.Error(), "W1 run 1") {
		t.Errorf("err = %v, want W1's failed run reported", err)
	}
	summary, rerr := os.ReadFile(filepath.Join(opts.Out, "summary.md"))
	if rerr != nil {
		t.Fatal(rerr)
	}
	summaryHas(t, string(summary), "| W1 | 0 |")
}

func TestBenchTakesTurnsBetweenAWorkloadsVariants(t *testing.T) {
	t.Parallel()
	cases, err := benchCases(BenchOptions{Only: []string{"W1", "W6", "W2"}, Base: baseConfig()})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range benchSchedule(cases, 2) {
		got = append(got, fmt.Sprintf("%s-%d", cases[s.c].name, s.run))
	}
	want := []string{"W1-1", "W1-2", "W6-1w-1", "W6-2w-1", "W6-4w-1", "W6-1w-2", "W6-2w-2", "W6-4w-2", "W2-1", "W2-2"}
	if !slices.Equal(got, want) {
		t.Errorf("runs in the order %v, want %v", got, want)
	}
}
