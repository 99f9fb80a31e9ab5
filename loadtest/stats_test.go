package loadtest

import (
	"os"
	"runtime"
	"testing"
	"time"
)

func TestPercentileNearestRank(t *testing.T) {
	t.Parallel()
	ms := func(vs ...int) []time.Duration {
		out := make([]time.Duration, len(vs))
		for i, v := range vs {
			out[i] = time.Duration(v) * time.Millisecond
		}
		return out
	}
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = time.Duration(i+1) * time.Millisecond
	}
	tests := []struct {
		name   string
		sorted []time.Duration
		p      float64
		want   time.Duration
	}{
		{"empty", nil, 50, 0},
		{"one value", ms(7), 99, 7 * time.Millisecond},
		{"p50 of odd count", ms(1, 2, 3, 4, 5), 50, 3 * time.Millisecond},
		{"p50 of even count takes the lower middle", ms(1, 2, 3, 4), 50, 2 * time.Millisecond},
		{"p100 is the max", ms(1, 2, 3, 4), 100, 4 * time.Millisecond},
		{"tiny p is the min", ms(1, 2, 3, 4), 0.1, 1 * time.Millisecond},
		{"p90 of 1..100", hundred, 90, 90 * time.Millisecond},
		{"p99 of 1..100", hundred, 99, 99 * time.Millisecond},
		{"p99.9 of 1..100 rounds up to the max", hundred, 99.9, 100 * time.Millisecond},
		{"p99 of 10 values is the max", ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 99, 10 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Percentile(tt.sorted, tt.p); got != tt.want {
				t.Errorf("Percentile(%v, %g) = %s, want %s", tt.sorted, tt.p, got, tt.want)
			}
		})
	}
}

func TestSummariseSortsAndReportsMilliseconds(t *testing.T) {
	t.Parallel()
	values := []time.Duration{30 * time.Millisecond, 1500 * time.Microsecond, 10 * time.Millisecond, 2 * time.Second}
	got := Summarise(values)
	want := Latency{Count: 4, P50Ms: 10, P90Ms: 2000, P99Ms: 2000, MaxMs: 2000}
	if got != want {
		t.Errorf("Summarise = %+v, want %+v", got, want)
	}
	if got := Summarise(nil); got != (Latency{}) {
		t.Errorf("Summarise(nil) = %+v, want zero", got)
	}
}

func TestSecondsBucketsByWholeSecondSinceStart(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return start.Add(time.Duration(s * float64(time.Second))) }
	accepted := []Sample{
		{At: at(0), Latency: 10 * time.Millisecond}, {At: at(0.5), Latency: 30 * time.Millisecond},
		{At: at(0.999), Latency: 20 * time.Millisecond}, {At: at(-0.1), Latency: 40 * time.Millisecond},
		{At: at(1), Latency: 5 * time.Millisecond}, {At: at(3.2), Latency: 7 * time.Millisecond},
	}
	delivered := []Sample{
		{At: at(0.2), Latency: 4 * time.Millisecond},
		{At: at(0.9), Latency: 8 * time.Millisecond},
		{At: at(1.1), Latency: 2 * time.Millisecond},
		{At: at(4.5), Latency: 100 * time.Millisecond},
	}
	got := Seconds(start, accepted, delivered)
	want := []Second{
		{T: 0, Accepted: 4, PublishP50Ms: 20, PublishP99Ms: 40, Delivered: 2, P50Ms: 4, P99Ms: 8},
		{T: 1, Accepted: 1, PublishP50Ms: 5, PublishP99Ms: 5, Delivered: 1, P50Ms: 2, P99Ms: 2},
		{T: 2}, // a stall is listed, not skipped
		{T: 3, Accepted: 1, PublishP50Ms: 7, PublishP99Ms: 7},
		{T: 4, Delivered: 1, P50Ms: 100, P99Ms: 100},
	}
	if len(got) != len(want) {
		t.Fatalf("Seconds = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("second %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	if got := Seconds(start, nil, nil); len(got) != 0 {
		t.Errorf("Seconds of nothing = %+v, want none", got)
	}
}

func TestSustainedIsTheMedianOfFullSecondsOfActivity(t *testing.T) {
	t.Parallel()
	accepted := func(s Second) int { return s.Accepted }
	secs := func(counts ...int) []Second {
		out := make([]Second, len(counts))
		for i, c := range counts {
			out[i] = Second{T: i, Accepted: c}
		}
		return out
	}
	tests := []struct {
		name    string
		seconds []Second
		want    float64
	}{
		{"none", nil, 0},
		{"nothing counted", secs(0, 0, 0), 0},
		{"fewer than three active seconds: the mean", secs(0, 100, 300, 0), 200},
		{"ramp-up and drain seconds are left out", secs(10, 1000, 1200, 1100, 5), 1100},
		{"idle seconds around the activity are left out", secs(0, 0, 7, 900, 1000, 3, 0), 950},
		{"a stall inside counts", secs(5, 1000, 0, 1000, 5), 1000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Sustained(tt.seconds, accepted); got != tt.want {
				t.Errorf("Sustained = %g, want %g", got, tt.want)
			}
		})
	}
}

func TestMedian(t *testing.T) {
	t.Parallel()
	values := []float64{5, 1, 3}
	if got := Median(values); got != 3 {
		t.Errorf("Median(5,1,3) = %g, want 3", got)
	}
	if values[0] != 5 {
		t.Errorf("Median reordered its argument: %v", values)
	}
	if got := Median([]float64{4, 1, 3, 2}); got != 2.5 {
		t.Errorf("Median(4,1,3,2) = %g, want 2.5", got)
	}
	if got := Median(nil); got != 0 {
		t.Errorf("Median() = %g, want 0", got)
	}
}

func TestParseVmHWM(t *testing.T) {
	t.Parallel()
	status := "Name:\tdispatch\nVmPeak:\t  900000 kB\nVmHWM:\t   51200 kB\nVmRSS:\t   40000 kB\n"
	got, err := parseVmHWM([]byte(status))
	if err != nil || got != 50<<20 {
		t.Errorf("parseVmHWM = %d, %v; want %d", got, err, 50<<20)
	}
	if _, err := parseVmHWM([]byte("Name:\tx\n")); err == nil {
		t.Error("parseVmHWM without a VmHWM line: no error")
	}
	self, err := PeakRSS(os.Getpid())
	if err != nil || self <= 0 {
		t.Errorf("PeakRSS(self) = %d, %v; want a positive size", self, err)
	}
}

func TestThousands(t *testing.T) {
	t.Parallel()
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 15000: "15,000", 1234567: "1,234,567", -4500: "-4,500"} {
		if got := thousands(n); got != want {
			t.Errorf("thousands(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestStartPeakOver grows this process by 128 MiB, frees it, and checks
// that the peak starts over. Not parallel: other tests' allocations must
// not raise the peak meanwhile. Under the race detector only about half
// of what is freed leaves the resident set (presumably the detector's
// shadow of the freed pages stays), so the peak must fall by a quarter of
// it: without the fresh start it does not fall at all.
func TestStartPeakOver(t *testing.T) {
	const size = 128 << 20
	b := make([]byte, size)
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1 // touch every page so it is resident
	}
	grown, err := PeakRSS(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	runtime.KeepAlive(b)
	if note := startPeakOver(); note != "" {
		t.Fatalf("startPeakOver: %s", note)
	}
	after, err := PeakRSS(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if after > grown-size/4 {
		t.Errorf("peak RSS after starting over = %d MiB, want well below the %d MiB it reached with %d MiB more", after>>20, grown>>20, size>>20)
	}
}
