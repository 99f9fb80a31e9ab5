package loadtest

import (
	"math"
	"slices"
	"time"
)

// Percentile returns the p-th percentile (0 < p <= 100) of sorted by the
// nearest-rank method: the smallest value that at least p % of the values
// are less than or equal to. It is 0 for an empty slice.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

// Latency summarises a latency distribution, in milliseconds so the JSON
// reads without unit conversion.
type Latency struct {
	Count int     `json:"count"`
	P50Ms float64 `json:"p50_ms"`
	P90Ms float64 `json:"p90_ms"`
	P99Ms float64 `json:"p99_ms"`
	MaxMs float64 `json:"max_ms"`
}

// Summarise sorts values in place and returns their percentiles.
func Summarise(values []time.Duration) Latency {
	slices.Sort(values)
	if len(values) == 0 {
		return Latency{}
	}
	return Latency{
		Count: len(values),
		P50Ms: ms(Percentile(values, 50)),
		P90Ms: ms(Percentile(values, 90)),
		P99Ms: ms(Percentile(values, 99)),
		MaxMs: ms(values[len(values)-1]),
	}
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/float64(time.Microsecond)) / 1000 }

// Sample is one timed thing that happened at At: a publish answered 202
// (Latency from sending it), or a webhook received (Latency from its
// publish's 202).
type Sample struct {
	At      time.Time
	Latency time.Duration
}

// Second is one second of a run, counted from the start of publishing.
type Second struct {
	// T is the second's start, in seconds since the run started.
	T int `json:"t"`
	// Accepted is how many publishes were answered 202 in this second;
	// PublishP50Ms and PublishP99Ms their latencies.
	Accepted     int     `json:"accepted"`
	PublishP50Ms float64 `json:"publish_p50_ms"`
	PublishP99Ms float64 `json:"publish_p99_ms"`
	// Delivered is how many webhooks the receiver accepted (first arrival
	// of each event and subscription) in this second; P50Ms and P99Ms are
	// their accepted→received latencies. Latencies are 0 when there is
	// nothing to time.
	Delivered int     `json:"delivered"`
	P50Ms     float64 `json:"p50_ms"`
	P99Ms     float64 `json:"p99_ms"`
}

// Seconds buckets accepted publishes and deliveries into whole seconds
// since start, up to the last second holding either; a second with
// nothing in it is still listed, so a stall shows as a gap in the plot.
// Times before start fall into second 0.
func Seconds(start time.Time, accepted, delivered []Sample) []Second {
	index := func(t time.Time) int { return max(int(t.Sub(start)/time.Second), 0) }
	n := 0
	for _, a := range accepted {
		n = max(n, index(a.At)+1)
	}
	for _, d := range delivered {
		n = max(n, index(d.At)+1)
	}
	out := make([]Second, n)
	for i := range out {
		out[i].T = i
	}
	bucket := func(samples []Sample, count func(*Second) *int, p50, p99 func(*Second) *float64) {
		latencies := make([][]time.Duration, n)
		for _, x := range samples {
			i := index(x.At)
			*count(&out[i])++
			latencies[i] = append(latencies[i], x.Latency)
		}
		for i, l := range latencies {
			slices.Sort(l)
			*p50(&out[i]) = ms(Percentile(l, 50))
			*p99(&out[i]) = ms(Percentile(l, 99))
		}
	}
	bucket(accepted, func(s *Second) *int { return &s.Accepted },
		func(s *Second) *float64 { return &s.PublishP50Ms }, func(s *Second) *float64 { return &s.PublishP99Ms })
	bucket(delivered, func(s *Second) *int { return &s.Delivered },
		func(s *Second) *float64 { return &s.P50Ms }, func(s *Second) *float64 { return &s.P99Ms })
	return out
}

// Sustained is the median per-second count, read through count, of the
// full seconds of activity: from the first second with a non-zero count to
// the last, less those two, which are partial (ramp-up and drain). With
// fewer than three such seconds it is the mean over them.
func Sustained(seconds []Second, count func(Second) int) float64 {
	first, last := -1, -1
	for i, s := range seconds {
		if count(s) > 0 {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	if first < 0 {
		return 0
	}
	active := seconds[first : last+1]
	if len(active) < 3 {
		total := 0
		for _, s := range active {
			total += count(s)
		}
		return float64(total) / float64(len(active))
	}
	inner := make([]float64, 0, len(active)-2)
	for _, s := range active[1 : len(active)-1] {
		inner = append(inner, float64(count(s)))
	}
	return Median(inner)
}

// Median returns the median of values (the mean of the middle two for an
// even count), leaving values unchanged; 0 for none.
func Median(values []float64) float64 {
	if len(values) == 0 {
		return 0
	}
	s := slices.Clone(values)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
