package loadtest

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dispatch-webhooks/dispatch/adapters/postgres/pgtest"
	"github.com/dispatch-webhooks/dispatch/adapters/redis/redistest"
)

func TestMain(m *testing.M) {
	// fasthttp's pool cleaners (the worker's webhook sender, the
	// receiver's server) sleep until their next idle check and then end,
	// their pools being empty or stopped. The first server that sends a
	// Date header (the API's) starts fasthttp's one clock for it, which
	// ticks for the rest of the process.
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*Client).mCleaner"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"))
}

// TestTinyRunDeliversEverythingAndWritesEveryReport starts Dispatch in
// process (a fresh database on the PostgreSQL server the tests use, a
// Redis prefix, one in-process worker), publishes 200 events to two
// subscriptions and checks the counts, the three report files and the
// profiles.
func TestTinyRunDeliversEverythingAndWritesEveryReport(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.DatabaseURL = serverURL()
	cfg.RedisURL = redistest.URL()
	redistest.Client(t) // fails with how to start Redis when it is down
	cfg.Workers = 0
	cfg.Events, cfg.Subscriptions, cfg.Publishers, cfg.PayloadBytes = 200, 2, 8, 256
	cfg.DrainTimeout = time.Minute

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var progress, cpuProfile, memProfile bytes.Buffer
	r, err := Run(ctx, cfg, Options{Progress: &progress, CPUProfile: &cpuProfile, MemProfile: &memProfile})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	for name, profile := range map[string][]byte{"CPU": cpuProfile.Bytes(), "allocation": memProfile.Bytes()} {
		if !bytes.HasPrefix(profile, []byte{0x1f, 0x8b}) { // pprof's gzipped protocol buffer
			t.Errorf("%s profile is not a pprof profile (%d bytes)", name, len(profile))
		}
	}
	p, d := r.Publish, r.Deliveries
	if p.Sent != 200 || p.Accepted != 200 || p.Failed != 0 {
		t.Errorf("publish sent/accepted/failed = %d/%d/%d, want 200/200/0 (errors: %v)", p.Sent, p.Accepted, p.Failed, p.Errors)
	}
	if p.Latency.Count != 200 || p.PerSecond <= 0 {
		t.Errorf("publish latency count %d, rate %g: want 200 and a positive rate", p.Latency.Count, p.PerSecond)
	}
	if d == nil {
		t.Fatal("no delivery stats with two subscriptions")
	}
	if d.Expected != 400 || d.Delivered != 400 || d.Lost != 0 || d.Duplicates != 0 || d.Unexpected != 0 {
		t.Errorf("expected/delivered/lost/duplicates/unexpected = %d/%d/%d/%d/%d, want 400/400/0/0/0",
			d.Expected, d.Delivered, d.Lost, d.Duplicates, d.Unexpected)
	}
	if d.Verified != d.Requests || d.BadSignatures != 0 {
		t.Errorf("verified %d of %d requests, %d refused (%s); want all verified, none refused",
			d.Verified, d.Requests, d.BadSignatures, d.FirstBadSig)
	}
	if d.AttemptsPerDelivery != 1 || d.DrainEnded != "all delivered" {
		t.Errorf("attempts per delivery %g, drain %q; want 1 and all delivered", d.AttemptsPerDelivery, d.DrainEnded)
	}
	if d.Latency.Count != 400 || d.Latency.P50Ms > d.Latency.P99Ms || d.Latency.P99Ms > d.Latency.MaxMs {
		t.Errorf("end-to-end latency %+v: want 400 values, p50 ≤ p99 ≤ max", d.Latency)
	}
	var accepted, delivered int
	for _, s := range r.Timeline {
		accepted += s.Accepted
		delivered += s.Delivered
	}
	if accepted != 200 || delivered != 400 {
		t.Errorf("timeline holds %d accepted and %d delivered, want 200 and 400", accepted, delivered)
	}
	if len(r.Memory) != 1 || r.Memory[0].PeakRSSBytes <= 0 || !strings.Contains(r.Memory[0].Name, "in process") {
		t.Errorf("memory = %+v, want this process's peak RSS, labelled in process", r.Memory)
	}

	dir := t.TempDir()
	jsonPath, mdPath, pngPath := filepath.Join(dir, "r.json"), filepath.Join(dir, "r.md"), filepath.Join(dir, "r.png")
	if err := WriteFiles(r, jsonPath, mdPath, pngPath); err != nil {
		t.Fatal(err)
	}
	var decoded Report
	if raw, err := os.ReadFile(jsonPath); err != nil || json.Unmarshal(raw, &decoded) != nil {
		t.Fatalf("JSON report unreadable: %v", err)
	}
	if decoded.Deliveries == nil || decoded.Deliveries.Delivered != 400 || decoded.Publish.Accepted != 200 {
		t.Errorf("JSON report = %+v, want the run's counts", decoded)
	}
	md, _ := os.ReadFile(mdPath)
	for _, want := range []string{"| metric | value |", "| events accepted/s |", "| lost / duplicates | 0 / 0 |", "peak RSS"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("Markdown report lacks %q:\n%s", want, md)
		}
	}
	png, _ := os.ReadFile(pngPath)
	if !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) || len(png) < 10_000 {
		t.Errorf("plot is not a PNG of some size (%d bytes)", len(png))
	}
	if !strings.Contains(progress.String(), "accepted") && r.PublishSeconds+r.DeliverySeconds > 2 {
		t.Errorf("no progress line in a run of more than a second:\n%s", progress.String())
	}
}

// serverURL is the PostgreSQL server the tests use, as pgtest finds it.
func serverURL() string {
	if u := os.Getenv("DATABASE_URL"); u != "" {
		return u
	}
	return pgtest.DefaultURL
}

func TestFlagsOverrideTheWorkload(t *testing.T) {
	t.Parallel()
	cfg, rf, err := parseRun([]string{"--workload", "w5", "--quick", "--subscriptions", "3", "--plot", "x.png"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Workload != "W5 (quick)" || cfg.Events != 500 || cfg.Subscriptions != 3 ||
		cfg.ReceiverLatency != 200*time.Millisecond || cfg.MaxInFlight != 50 || rf.plotPath != "x.png" {
		t.Errorf("config = %+v, want W5 quick with 3 subscriptions", cfg)
	}
	cfg, _, err = parseRun([]string{"--ingest-only", "--events", "10"}, &bytes.Buffer{})
	if err != nil || cfg.Subscriptions != 0 || cfg.Events != 10 {
		t.Errorf("--ingest-only: %+v, %v; want no subscriptions", cfg, err)
	}
	for _, args := range [][]string{
		{"--workload", "W9"},
		{"--target", "http://10.0.0.5:8080", "--api-key", "load-key-0123456789abcdefghijklmnopq"},
		{"--target", "http://127.0.0.1:8080"},
		{"--receiver-failure-rate", "1.5"},
		{"--events", "0"},
	} {
		if _, _, err := parseRun(args, &bytes.Buffer{}); err == nil {
			t.Errorf("parseRun(%q): no error", args)
		}
	}
}

func TestEveryWorkloadIsValid(t *testing.T) {
	t.Parallel()
	for _, w := range Workloads {
		for _, quick := range []bool{false, true} {
			if err := w.Configure(DefaultConfig(), quick).Validate(); err != nil {
				t.Errorf("%s (quick %v): %v", w.Name, quick, err)
			}
		}
	}
	cases, err := benchCases(BenchOptions{Base: DefaultConfig(), Only: []string{"W6"}})
	if err != nil || len(cases) != 3 || cases[2].name != "W6-4w" || cases[2].cfg.Workers != 4 {
		t.Errorf("W6 bench cases = %+v, %v; want W6-1w, W6-2w, W6-4w", cases, err)
	}
	cases, err = benchCases(BenchOptions{Base: DefaultConfig(), Only: []string{"W7", "W8"}})
	if err != nil || len(cases) != 4 {
		t.Fatalf("W7 and W8 bench cases = %+v, %v; want two each", cases, err)
	}
	for i, want := range []struct {
		name                         string
		subscriptions, hostile, idle int
	}{{"W7-clean", 17, 0, 0}, {"W7-hostile", 20, 3, 0}, {"W8-10", 10, 0, 0}, {"W8-100k", 10, 0, 99_990}} {
		c := cases[i].cfg
		if cases[i].name != want.name || c.Workload != want.name || c.Subscriptions != want.subscriptions ||
			c.FailingSubscriptions+c.HangingSubscriptions != want.hostile || c.IdleSubscriptions != want.idle {
			t.Errorf("case %d = %s: %+v; want %+v", i, cases[i].name, c, want)
		}
		if err := c.Validate(); err != nil {
			t.Errorf("%s: %v", cases[i].name, err)
		}
	}
	if w, err := FindWorkload("w7-clean"); err != nil || w.Configure(DefaultConfig(), false).Healthy() != 17 {
		t.Errorf("FindWorkload(w7-clean) = %+v, %v; want the clean variant", w, err)
	}
}

// TestTinyHostileRunCountsTheHealthySubscriptions runs a hostile mix in
// miniature: of three subscriptions one answers 500 and one hangs past
// its timeout, beside idle subscriptions that match nothing. The healthy
// one gets everything, and the figures count it alone.
func TestTinyHostileRunCountsTheHealthySubscriptions(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.DatabaseURL = serverURL()
	cfg.RedisURL = redistest.URL()
	redistest.Client(t)
	cfg.Workers = 0
	cfg.Events, cfg.Publishers, cfg.PayloadBytes = 100, 8, 256
	cfg.Subscriptions, cfg.FailingSubscriptions, cfg.HangingSubscriptions, cfg.IdleSubscriptions = 3, 1, 1, 25
	cfg.SubscriptionTimeout = 300 * time.Millisecond
	cfg.DrainTimeout = time.Minute

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := Run(ctx, cfg, Options{})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	d := r.Deliveries
	if d == nil {
		t.Fatal("no delivery stats")
	}
	if d.Expected != 100 || d.Delivered != 100 || d.Lost != 0 || d.DrainEnded != "all delivered" {
		t.Errorf("expected/delivered/lost = %d/%d/%d (%s), want 100/100/0: the healthy subscription's alone",
			d.Expected, d.Delivered, d.Lost, d.DrainEnded)
	}
	if d.FailedByReceiver == 0 || d.Hung == 0 {
		t.Errorf("failed by receiver %d, hung %d: want both endpoints to have been tried", d.FailedByReceiver, d.Hung)
	}
	if d.Unexpected != 0 {
		t.Errorf("%d unexpected arrivals: the idle subscriptions matched something", d.Unexpected)
	}
	if !slices.ContainsFunc(r.Notes, func(n string) bool { return strings.Contains(n, "hostile mix") }) {
		t.Errorf("notes %q do not say the figures are the healthy subscriptions'", r.Notes)
	}
}

// TestProfileThatCannotBeWrittenStopsTheRun: a --cpuprofile or
// --memprofile whose file cannot be created is an error before anything
// runs, naming the file.
func TestProfileThatCannotBeWrittenStopsTheRun(t *testing.T) {
	t.Parallel()
	for _, flag := range []string{"--cpuprofile", "--memprofile"} {
		path := filepath.Join(t.TempDir(), "missing", "x.prof")
		var stdout, stderr bytes.Buffer
		if code := Main([]string{"--workload", "W4", "--quick", flag, path}, &stdout, &stderr); code != 1 {
			t.Errorf("%s to a missing folder: exit %d, want 1", flag, code)
		}
		if !strings.Contains(stderr.String(), path) || stdout.Len() != 0 {
			t.Errorf("%s: stderr %q, stdout %q; want the file named and no report", flag, stderr.String(), stdout.String())
		}
	}
}

// The queue settings go to the roles the tool starts; a target deployment
// has its own.
func TestQueueSettingsAreChecked(t *testing.T) {
	c := DefaultConfig()
	c.Queue, c.QueuePartitions = "redis", 4
	if err := c.Validate(); err != nil {
		t.Errorf("--queue redis --queue-partitions 4: %v", err)
	}
	c.QueuePartitions = 5000
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--queue-partitions must be 0..1024") {
		t.Errorf("--queue-partitions 5000: %v, want it refused", err)
	}
	c.QueuePartitions, c.Target, c.APIKey = 0, "http://127.0.0.1:8080", "k"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--queue and --queue-partitions are the target deployment's own") {
		t.Errorf("--queue with --target: %v, want it refused", err)
	}
}
