package loadtest

import (
	"fmt"
	"slices"
	"strings"
)

// figures are what a bench case's runs measured: the medians over its
// runs, and the worst of what must hold in every run.
type figures struct {
	name       string // the bench case's
	workers    int
	accepted   float64 // events accepted/s
	publishP99 float64 // ms
	peakRSS    int64   // the largest peak RSS of any process in any run, bytes
	deliveries bool    // the runs counted deliveries; the fields below are set only then
	delivered  float64 // deliveries/s, from the first publish to the last delivery
	p50, p99   float64 // accepted→received, ms
	lost       int64   // the most lost in any run
}

// caseFigures sums up runs of one case; ok is false without runs.
func caseFigures(workers int, runs []*Report) (f figures, ok bool) {
	if len(runs) == 0 {
		return figures{}, false
	}
	med := func(of func(*Report) float64) float64 {
		vs := make([]float64, len(runs))
		for i, r := range runs {
			vs[i] = of(r)
		}
		return Median(vs)
	}
	f = figures{
		workers:    workers,
		accepted:   med(func(r *Report) float64 { return r.Publish.PerSecond }),
		publishP99: med(func(r *Report) float64 { return r.Publish.Latency.P99Ms }),
		deliveries: !slices.ContainsFunc(runs, func(r *Report) bool { return r.Deliveries == nil }),
	}
	for _, r := range runs {
		for _, p := range r.Memory {
			f.peakRSS = max(f.peakRSS, p.PeakRSSBytes)
		}
	}
	if f.deliveries {
		f.delivered = med(func(r *Report) float64 { return r.Deliveries.PerSecond })
		f.p50 = med(func(r *Report) float64 { return r.Deliveries.Latency.P50Ms })
		f.p99 = med(func(r *Report) float64 { return r.Deliveries.Latency.P99Ms })
		for _, r := range runs {
			f.lost = max(f.lost, r.Deliveries.Lost)
		}
	}
	return f, true
}

// A requirement is one condition of a target; failed says how it fell
// short ("events/s 0.94": the share of its bound reached), empty when met.
type requirement struct{ failed string }

// atLeast and atMost hold a figure to its bound.
func atLeast(what string, got, bound float64) requirement {
	if got >= bound {
		return requirement{}
	}
	return requirement{fmt.Sprintf("%s %.2f", what, got/bound)}
}

func atMost(what string, got, bound float64) requirement {
	if got <= bound {
		return requirement{}
	}
	return requirement{fmt.Sprintf("%s %.2f", what, bound/got)}
}

// noLoss is the requirement every delivery workload carries: nothing
// accepted goes undelivered, in any run.
func noLoss(f figures) requirement {
	if f.lost > 0 {
		return requirement{fmt.Sprintf("%d lost", f.lost)}
	}
	return requirement{}
}

// verdict is "met" when every requirement holds, else "**not met**: "
// and how each failing one fell short.
func verdict(reqs ...requirement) string {
	var failed []string
	for _, r := range reqs {
		if r.failed != "" {
			failed = append(failed, r.failed)
		}
	}
	if len(failed) == 0 {
		return "met"
	}
	return "**not met**: " + strings.Join(failed, ", ")
}

// Judges of the standard workloads (Workload.judge): f is the case's
// figures, bench every case's of the same bench by name.

func judgeW1(f figures, _ map[string]figures) string {
	return verdict(atLeast("events/s", f.accepted, 15_000), atMost("publish p99", f.publishP99, 25))
}

func judgeW2(f figures, _ map[string]figures) string {
	return verdict(atMost("p50", f.p50, 5), atMost("p99", f.p99, 25), noLoss(f))
}

func judgeW3(f figures, _ map[string]figures) string {
	return verdict(atLeast("deliveries/s", f.delivered, 8_000), atMost("peak RSS", float64(f.peakRSS), 200<<20), noLoss(f))
}

func judgeW4(f figures, _ map[string]figures) string {
	return verdict(atLeast("deliveries/s", f.delivered, 15_000), noLoss(f))
}

// judgeW5 holds W5 to 90 % of the lower of its concurrency bound and the
// same bench's W3 figure, or of the bound alone when W3 did not run.
func judgeW5(f figures, bench map[string]figures) string {
	const bound = 20 * 50 / 0.2 // subscriptions × max_in_flight / receiver latency
	bar, of := 0.9*bound, "of 90 % of 5,000/s"
	if w3, ok := bench["W3"]; ok && w3.deliveries && w3.delivered < bound {
		bar, of = 0.9*w3.delivered, "of 90 % of W3's"
	}
	return verdict(atLeast("deliveries/s "+of, f.delivered, bar), noLoss(f))
}

// judgeW6 holds each worker count to 0.95 of the same bench's one-worker
// figure, which is the reference.
func judgeW6(f figures, bench map[string]figures) string {
	if f.workers == 1 {
		return verdict(noLoss(f)) + " (the reference)"
	}
	one, ok := bench[variantName("W6", 1)]
	if !ok || !one.deliveries || one.delivered <= 0 {
		return "not judged: no one-worker figure"
	}
	ratio := f.delivered / one.delivered
	scaling := requirement{}
	if ratio < 0.95 {
		scaling.failed = fmt.Sprintf("%.2f of 1 worker's figure", ratio)
	}
	v := verdict(scaling, noLoss(f))
	if ratio >= 0.95 {
		v += fmt.Sprintf(" (%.2f of 1 worker's figure)", ratio)
	}
	return v
}

// judgeW7 holds the hostile mix's healthy subscriptions to 80 % of the
// clean run's deliveries/s and to a p99 of 250 ms; the clean run is the
// reference.
func judgeW7(f figures, bench map[string]figures) string {
	if f.name == w7Clean {
		return verdict(noLoss(f)) + " (the reference)"
	}
	reqs := []requirement{atMost("healthy p99", f.p99, 250), noLoss(f)}
	if clean, ok := bench[w7Clean]; ok && clean.deliveries && clean.delivered > 0 {
		reqs = append(reqs, atLeast("healthy deliveries/s of 80 % of the clean run's", f.delivered, 0.8*clean.delivered))
	}
	return verdict(reqs...)
}

// judgeW8 holds the run with 100,000 subscriptions to 80 % of the
// 10-subscription run's ingest and delivery rates; that run is the
// reference.
func judgeW8(f figures, bench map[string]figures) string {
	if f.name == w8Few {
		return verdict(noLoss(f)) + " (the reference)"
	}
	few, ok := bench[w8Few]
	if !ok || !few.deliveries || few.delivered <= 0 || few.accepted <= 0 {
		return "not judged: no 10-subscription figure"
	}
	return verdict(atLeast("events/s of 80 % of the reference's", f.accepted, 0.8*few.accepted),
		atLeast("deliveries/s of 80 % of the reference's", f.delivered, 0.8*few.delivered),
		atMost("peak RSS", float64(f.peakRSS), 200<<20), noLoss(f))
}
