package loadtest

import (
	"strings"
	"testing"
)

func TestVerdictsHoldTheMediansToTheTargets(t *testing.T) {
	t.Parallel()
	const mib = 1 << 20
	delivery := func(perSecond float64) figures {
		return figures{workers: 1, accepted: 1000, deliveries: true, delivered: perSecond, p50: 2, p99: 10, peakRSS: 150 * mib}
	}
	with := func(f figures, change func(*figures)) figures {
		change(&f)
		return f
	}
	w3 := func(perSecond float64) map[string]figures { return map[string]figures{"W3": delivery(perSecond)} }
	w6 := func(one float64) map[string]figures {
		return map[string]figures{"W6-1w": delivery(one), "W3": delivery(2 * one)}
	}
	w7 := func(clean float64) map[string]figures { return map[string]figures{"W7-clean": delivery(clean)} }
	w8 := func(few float64) map[string]figures { return map[string]figures{"W8-10": delivery(few)} }
	cases := []struct {
		name  string
		judge func(figures, map[string]figures) string
		f     figures
		bench map[string]figures
		want  string
	}{
		{"W1 met", judgeW1, figures{accepted: 15_000, publishP99: 25}, nil, "met"},
		{"W1 short of its rate", judgeW1, figures{accepted: 14_100, publishP99: 9}, nil, "**not met**: events/s 0.94"},
		{"W1 slow to answer", judgeW1, figures{accepted: 20_000, publishP99: 50}, nil, "**not met**: publish p99 0.50"},
		{"W1 both", judgeW1, figures{accepted: 7_500, publishP99: 50}, nil, "**not met**: events/s 0.50, publish p99 0.50"},
		{"W2 met", judgeW2, with(delivery(1000), func(f *figures) { f.p50, f.p99 = 5, 25 }), nil, "met"},
		{"W2 p50", judgeW2, with(delivery(1000), func(f *figures) { f.p50 = 6.25 }), nil, "**not met**: p50 0.80"},
		{"W2 p99", judgeW2, with(delivery(1000), func(f *figures) { f.p99 = 50 }), nil, "**not met**: p99 0.50"},
		{"W2 lost", judgeW2, with(delivery(1000), func(f *figures) { f.lost = 3 }), nil, "**not met**: 3 lost"},
		{"W3 met", judgeW3, delivery(8_000), nil, "met"},
		{"W3 short", judgeW3, delivery(6_000), nil, "**not met**: deliveries/s 0.75"},
		{"W3 memory", judgeW3, with(delivery(9_000), func(f *figures) { f.peakRSS = 250 * mib }), nil, "**not met**: peak RSS 0.80"},
		{"W4 met", judgeW4, delivery(15_000), nil, "met"},
		{"W4 short", judgeW4, delivery(14_100), nil, "**not met**: deliveries/s 0.94"},
		{"W5 against the bound", judgeW5, delivery(4_500), w3(9_000), "met"},
		{"W5 short of the bound", judgeW5, delivery(4_050), w3(9_000), "**not met**: deliveries/s of 90 % of 5,000/s 0.90"},
		{"W5 against a slower W3", judgeW5, delivery(3_600), w3(4_000), "met"},
		{"W5 short of a slower W3", judgeW5, delivery(3_240), w3(4_000), "**not met**: deliveries/s of 90 % of W3's 0.90"},
		{"W5 without W3", judgeW5, delivery(4_400), nil, "**not met**: deliveries/s of 90 % of 5,000/s 0.98"},
		{"W6 reference", judgeW6, delivery(9_000), w6(9_000), "met (the reference)"},
		{"W6 scales", judgeW6, with(delivery(8_640), func(f *figures) { f.workers = 2 }), w6(9_000), "met (0.96 of 1 worker's figure)"},
		{"W6 falls", judgeW6, with(delivery(7_200), func(f *figures) { f.workers = 4 }), w6(9_000), "**not met**: 0.80 of 1 worker's figure"},
		{"W7 reference", judgeW7, with(delivery(3_400), func(f *figures) { f.name = "W7-clean" }), nil, "met (the reference)"},
		{"W7 met", judgeW7, with(delivery(2_800), func(f *figures) { f.p99 = 250 }), w7(3_400), "met"},
		{"W7 starved", judgeW7, with(delivery(1_700), func(f *figures) { f.p99 = 1000 }), w7(3_400),
			"**not met**: healthy p99 0.25, healthy deliveries/s of 80 % of the clean run's 0.62"},
		{"W7 without the clean run", judgeW7, delivery(3_000), nil, "met"},
		{"W8 reference", judgeW8, with(delivery(9_000), func(f *figures) { f.name = "W8-10" }), nil, "met (the reference)"},
		{"W8 met", judgeW8, with(delivery(7_200), func(f *figures) { f.accepted = 800 }), w8(9_000), "met"},
		{"W8 slow", judgeW8, with(delivery(3_600), func(f *figures) { f.accepted = 400 }), w8(9_000),
			"**not met**: events/s of 80 % of the reference's 0.50, deliveries/s of 80 % of the reference's 0.50"},
		{"W8 without the reference", judgeW8, delivery(9_000), nil, "not judged: no 10-subscription figure"},
		{"W6 without one worker", judgeW6, with(delivery(7_200), func(f *figures) { f.workers = 4 }), w3(9_000), "not judged: no one-worker figure"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := tc.judge(tc.f, tc.bench); got != tc.want {
				t.Errorf("verdict = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestEveryWorkloadIsJudged(t *testing.T) {
	t.Parallel()
	for _, w := range Workloads {
		if w.judge == nil {
			t.Errorf("%s has no judge", w.Name)
		}
	}
}

func TestCaseFiguresTakeMediansAndTheWorstRun(t *testing.T) {
	t.Parallel()
	run := func(perSecond float64, lost int64, rss int64) *Report {
		return &Report{
			Publish:    PublishStats{PerSecond: perSecond, Latency: Latency{P99Ms: perSecond / 1000}},
			Deliveries: &DeliveryStats{PerSecond: perSecond, Lost: lost, Latency: Latency{P50Ms: 1, P99Ms: 2}},
			Memory:     []ProcessMemory{{Name: "dispatch-load", PeakRSSBytes: rss}, {Name: "worker 1", PeakRSSBytes: 10}},
		}
	}
	f, ok := caseFigures(2, []*Report{run(9_000, 0, 100), run(7_000, 4, 300), run(8_000, 0, 200)})
	if !ok {
		t.Fatal("no figures from three runs")
	}
	want := figures{workers: 2, accepted: 8_000, publishP99: 8, deliveries: true, delivered: 8_000, p50: 1, p99: 2, lost: 4, peakRSS: 300}
	if f != want {
		t.Errorf("figures = %+v, want %+v", f, want)
	}
	if _, ok := caseFigures(1, nil); ok {
		t.Error("figures from no runs")
	}
	ingest := run(9_000, 0, 100)
	ingest.Deliveries = nil
	if f, _ := caseFigures(1, []*Report{ingest}); f.deliveries || f.delivered != 0 {
		t.Errorf("an ingest-only run counted deliveries: %+v", f)
	}
}

func TestSummaryGivesEachCaseItsVerdict(t *testing.T) {
	t.Parallel()
	w6, _ := FindWorkload("W6")
	run := func(perSecond float64) *Report {
		return &Report{Deliveries: &DeliveryStats{PerSecond: perSecond, SustainedPerSecond: perSecond, AttemptsPerDelivery: 1}}
	}
	cases := []benchCase{
		{name: "W6-1w", workload: w6, cfg: Config{Workers: 1}},
		{name: "W6-4w", workload: w6, cfg: Config{Workers: 4}},
	}
	results := [][]*Report{{run(9_000), run(10_000)}, {run(8_000), run(7_000)}}
	for _, quick := range []bool{false, true} {
		var b strings.Builder
		if err := writeSummary(&b, BenchOptions{Runs: 2, Quick: quick}, cases, results); err != nil {
			t.Fatal(err)
		}
		if quick {
			summaryHas(t, b.String(), "| not judged (quick) |")
			continue
		}
		summaryHas(t, b.String(),
			"| 2 and 4 workers each ≥ 0.95 × the 1-worker figure | met (the reference) |",
			"| 2 and 4 workers each ≥ 0.95 × the 1-worker figure | **not met**: 0.79 of 1 worker's figure |",
		)
	}
}
