package loadtest

import (
	"fmt"
	"strings"
	"time"
)

// Workload is one of the standard workloads of the performance targets
// (SPEC §6): a name, what it measures, the target it is judged by, and how
// it changes the default settings.
type Workload struct {
	// Name is what --workload takes: W1 … W8 (or a variant, W7-clean).
	Name string
	// What the workload is, for reports and the README.
	Title string
	// Target is the figure it must reach.
	Target string
	// Apply sets the workload's knobs on a default Config.
	Apply func(*Config)
	// Quick scales Apply's settings down for development runs.
	Quick func(*Config)
	// WorkerSweep, when set, makes the bench suite run the workload once
	// per entry with that many worker processes, the variants taking turns
	// (benchSchedule).
	WorkerSweep []int
	// Variants, when set, makes the bench suite run the workload once per
	// variant, named <Name>-<variant>, the variants taking turns; a single
	// run takes a variant by that name, or the workload as Apply leaves it.
	Variants []Variant
	// judge says whether a bench case of the workload met Target, from
	// its runs' figures and those of the bench's other cases (verdict.go).
	judge func(f figures, bench map[string]figures) string
}

// openLoopPublishers is how many publishes W3 and W6 keep in flight: well
// above what the API holds in its group commits at full speed (a few dozen
// here), so that publishing waits on Dispatch.
const openLoopPublishers = 256

// Workloads are the standard workloads, in the order the bench suite runs
// them.
var Workloads = []Workload{
	{
		Name: "W1", Title: "durable ingest: 50,000 events of 1 KiB, 64 concurrent publishers, no subscriptions",
		Target: "≥ 15,000 events/s accepted, p99 publish ≤ 25 ms",
		judge:  judgeW1,
		Apply: func(c *Config) {
			c.Events, c.PayloadBytes, c.Publishers, c.Subscriptions = 50_000, 1024, 64, 0
		},
		Quick: func(c *Config) { c.Events = 5_000 },
	},
	{
		Name: "W2", Title: "steady: 1,000 events/s for 60 s, one subscription, receiver answers at once",
		Target: "accepted→received p50 ≤ 5 ms, p99 ≤ 25 ms, zero loss",
		judge:  judgeW2,
		Apply: func(c *Config) {
			c.Events, c.Duration, c.Rate, c.Publishers, c.Subscriptions = 0, 60*time.Second, 1000, 32, 1
		},
		Quick: func(c *Config) { c.Duration = 10 * time.Second },
	},
	{
		// Open loop: the publishers must offer more than Dispatch drains,
		// so that the figure is Dispatch's capacity and not the round
		// trips of a few publishers waiting on their answers. With 32,
		// fewer than 32 events were ever in the pipeline: every batch
		// (group commit, claim, record, protection pipeline) held a few
		// rows and more worker processes split them further (W6).
		Name: "W3", Title: "throughput: 100,000 events, one subscription, open loop (ingest and delivery together)",
		Target: "≥ 8,000 events delivered/s sustained; every process ≤ 200 MiB RSS",
		judge:  judgeW3,
		Apply: func(c *Config) {
			c.Events, c.Publishers, c.Subscriptions = 100_000, openLoopPublishers, 1
		},
		Quick: func(c *Config) { c.Events = 10_000 },
	},
	{
		Name: "W4", Title: "fan-out: 2,000 events × 50 subscriptions",
		Target: "≥ 15,000 deliveries/s",
		judge:  judgeW4,
		Apply: func(c *Config) {
			c.Events, c.Publishers, c.Subscriptions = 2_000, 16, 50
		},
		Quick: func(c *Config) { c.Events = 200 },
	},
	{
		// The concurrency bound is 20 × 50 in flight / 0.2 s = 5,000/s. A
		// worker attempts at most DISPATCH_WORKER_CONCURRENCY deliveries
		// at once (256 by default), which alone would cap one worker at
		// 1,280/s; the workload raises it to the 1,000 requests the
		// subscriptions allow in flight.
		Name: "W5", Title: "slow endpoints: 20 subscriptions answering in 200 ms, max_in_flight 50 each; 3,000 events",
		Target: "≥ 90 % of min(5,000/s concurrency bound, W3 figure)",
		judge:  judgeW5,
		Apply: func(c *Config) {
			c.Events, c.Publishers, c.Subscriptions = 3_000, 16, 20
			c.ReceiverLatency, c.MaxInFlight, c.WorkerConcurrency = 200*time.Millisecond, 50, 1000
		},
		Quick: func(c *Config) { c.Events = 500 },
	},
	{
		Name: "W6", Title: "scaling: W3 with 1, 2 and 4 worker processes",
		Target: "2 and 4 workers each ≥ 0.95 × the 1-worker figure",
		judge:  judgeW6,
		Apply: func(c *Config) {
			c.Events, c.Publishers, c.Subscriptions = 100_000, openLoopPublishers, 1
		},
		Quick:       func(c *Config) { c.Events = 10_000 },
		WorkerSweep: []int{1, 2, 4},
	},
	{
		// Steady, not open loop: the target is the healthy subscriptions'
		// latency, which a backlog would measure instead. 17 healthy
		// subscriptions at 200 events/s are 3,400 deliveries/s; the
		// failing ones' retries and open circuits, and the hanging one's
		// requests held for its whole timeout, come on top.
		Name: "W7", Title: "hostile mix: 200 events/s for 30 s to 20 subscriptions, 2 answering 500, 1 hanging until its 10 s timeout, 17 healthy; against the 17 alone (W7-clean)",
		Target: "healthy subscriptions' deliveries/s ≥ 80 % of W7-clean's, their p99 ≤ 250 ms, zero loss",
		judge:  judgeW7,
		Apply: func(c *Config) {
			c.Events, c.Duration, c.Rate, c.Publishers = 0, 30*time.Second, 200, 32
			c.Subscriptions, c.FailingSubscriptions, c.HangingSubscriptions = 20, 2, 1
			c.SubscriptionTimeout, c.MaxInFlight = 10*time.Second, 100
		},
		Quick: func(c *Config) { c.Duration = 10 * time.Second },
		Variants: []Variant{
			{Name: "clean", Apply: func(c *Config) {
				c.Subscriptions, c.FailingSubscriptions, c.HangingSubscriptions = c.Healthy(), 0, 0
			}},
			{Name: "hostile", Apply: func(*Config) {}},
		},
	},
	{
		Name: "W8", Title: "many subscriptions: 10,000 events matching 10 subscriptions, beside 99,990 that match nothing; against the 10 alone (W8-10)",
		Target: "events/s and deliveries/s ≥ 80 % of W8-10's, every process ≤ 200 MiB RSS, zero loss",
		judge:  judgeW8,
		Apply: func(c *Config) {
			c.Events, c.Publishers, c.Subscriptions, c.IdleSubscriptions = 10_000, openLoopPublishers, 10, 99_990
		},
		Quick: func(c *Config) { c.Events, c.IdleSubscriptions = 2_000, 9_990 },
		Variants: []Variant{
			{Name: "10", Apply: func(c *Config) { c.IdleSubscriptions = 0 }},
			{Name: "100k", Apply: func(*Config) {}},
		},
	},
}

// A Variant is one setting of a workload the bench compares with the
// others (W7: a clean and a hostile run).
type Variant struct {
	Name  string
	Apply func(*Config)
}

// The bench cases the judges of W7 and W8 compare with.
const (
	w7Clean = "W7-clean"
	w8Few   = "W8-10"
)

// FindWorkload returns the standard workload called name (case-insensitive).
func FindWorkload(name string) (Workload, error) {
	var names []string
	for _, w := range Workloads {
		if strings.EqualFold(w.Name, name) {
			return w, nil
		}
		names = append(names, w.Name)
		for _, v := range w.Variants {
			full := w.Name + "-" + v.Name
			if strings.EqualFold(full, name) {
				apply := w.Apply
				w.Name, w.Variants = full, nil
				w.Apply = func(c *Config) { apply(c); v.Apply(c) }
				return w, nil
			}
			names = append(names, full)
		}
	}
	return Workload{}, fmt.Errorf("unknown workload %q (want one of %s)", name, strings.Join(names, ", "))
}

// Configure returns base with the workload's settings applied, scaled
// down when quick.
func (w Workload) Configure(base Config, quick bool) Config {
	c := base
	c.Workload = w.Name
	w.Apply(&c)
	if quick && w.Quick != nil {
		w.Quick(&c)
		c.Workload += " (quick)"
	}
	return c
}
