package loadtest

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-webhooks/dispatch/adapters/redis/redistest"
)

func TestSweepPointTakesMedians(t *testing.T) {
	t.Parallel()
	run := func(cpu, p50, p99 float64, lost int64) *Report {
		return &Report{CPU: &CPUUse{PerEventMs: cpu}, Deliveries: &DeliveryStats{Latency: Latency{P50Ms: p50, P99Ms: p99}, Lost: lost}}
	}
	p := sweepPoint("after", 1000, []*Report{run(0.5, 2, 20, 0), run(0.3, 1, 9, 1), run(0.4, 3, 30, 0)})
	if p.CPUPerEventMs != 0.4 || p.P50Ms != 2 || p.P99Ms != 20 || p.Lost != 1 || p.Runs != 3 {
		t.Errorf("point = %+v, want medians 0.4 ms, 2 / 20 ms, 1 lost over 3 runs", p)
	}
}

// TestTinySweepMeasuresEachRate runs a sweep in miniature with every role
// a process: each rate gets its figures, nothing is lost, and the JSON,
// table and plot are written.
func TestTinySweepMeasuresEachRate(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin, remove, err := BuildDispatch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer remove()
	base := DefaultConfig()
	base.DatabaseURL = serverURL()
	base.RedisURL = redistest.URL()
	redistest.Client(t)
	base.DrainTimeout = time.Minute
	out := t.TempDir()
	points, err := Sweep(ctx, SweepOptions{Base: base, Rates: []float64{50, 200}, Duration: 2 * time.Second, Runs: 1,
		Builds: []SweepBuild{{Name: "dispatch", Bin: bin}}, Out: out})
	if err != nil {
		t.Fatal(err)
	}
	if len(points) != 2 {
		t.Fatalf("points = %+v, want one per rate", points)
	}
	for _, p := range points {
		if p.Runs != 1 || p.CPUPerEventMs <= 0 || p.P99Ms <= 0 || p.Lost != 0 {
			t.Errorf("point at %g/s = %+v, want a run with CPU per event and latency, nothing lost", p.Rate, p)
		}
	}
	raw, err := os.ReadFile(filepath.Join(out, "sweep.json"))
	if err != nil {
		t.Fatal(err)
	}
	var back []SweepPoint
	if err := json.Unmarshal(raw, &back); err != nil || len(back) != 2 {
		t.Errorf("sweep.json = %s (%v), want the two points", raw, err)
	}
	if md, err := os.ReadFile(filepath.Join(out, "sweep.md")); err != nil || !strings.Contains(string(md), "| dispatch | 200/s |") {
		t.Errorf("sweep.md = %s (%v), want a row per rate", md, err)
	}
	if png, err := os.ReadFile(filepath.Join(out, "sweep.png")); err != nil || !strings.HasPrefix(string(png), "\x89PNG") {
		t.Errorf("sweep.png: %v, want a PNG", err)
	}
}
