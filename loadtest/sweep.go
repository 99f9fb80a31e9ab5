package loadtest

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"image/color"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// The sweep's defaults: everyday rates, from a quiet deployment's to a
// busy one's, each held long enough for its batches to settle.
var (
	DefaultSweepRates    = []float64{100, 1000, 5000}
	DefaultSweepDuration = 30 * time.Second
)

// SweepOptions configures a sweep: steady runs at each rate, for each
// build, the builds and rates taking turns run after run.
type SweepOptions struct {
	// Base is the run every point starts from; the sweep sets its rate,
	// its duration, one subscription and Processes.
	Base     Config
	Rates    []float64
	Duration time.Duration
	Runs     int
	// Builds are the dispatch binaries to compare, by name; one is the
	// usual sweep, two an A/B.
	Builds []SweepBuild
	// Out is the folder of sweep.json, sweep.md and sweep.png.
	Out string
	// Progress and Log are as in BenchOptions.
	Progress, Stderr, Log io.Writer
}

// SweepBuild is one dispatch binary a sweep measures.
type SweepBuild struct {
	Name, Bin string
}

// SweepPoint is one build's figures at one rate: medians of its runs.
type SweepPoint struct {
	Build string  `json:"build"`
	Rate  float64 `json:"rate"`
	Runs  int     `json:"runs"`
	// CPUPerEventMs is the machine's CPU per event (Dispatch's processes,
	// PostgreSQL, Redis) and CPUPerEventRuns each run's figure.
	CPUPerEventMs   float64   `json:"cpu_per_event_ms"`
	CPUPerEventRuns []float64 `json:"cpu_per_event_runs_ms"`
	// P50Ms and P99Ms are accepted→received latency.
	P50Ms float64 `json:"p50_ms"`
	P99Ms float64 `json:"p99_ms"`
	// Lost counts deliveries that never arrived, over every run.
	Lost int64 `json:"lost"`
}

// sweepConfig is the run of one point: W2's shape (one subscription, a
// receiver that answers at once) at rate, with every role a process.
func sweepConfig(base Config, rate float64, d time.Duration, bin string) Config {
	c := base
	c.Workload = "sweep-" + strconv.FormatFloat(rate, 'f', -1, 64)
	c.Events, c.Duration, c.Rate, c.Subscriptions = 0, d, rate, 1
	// Enough publishers that the rate, not their round trips, paces the
	// run.
	c.Publishers = max(32, int(rate/100))
	c.Processes, c.Workers = true, max(c.Workers, 1)
	c.DispatchBin = bin
	return c
}

// Sweep measures the cost per event and the latency at each rate and
// writes them, with a plot of the cost per event against the rate.
func Sweep(ctx context.Context, opts SweepOptions) ([]SweepPoint, error) {
	if opts.Runs < 1 {
		return nil, fmt.Errorf("--runs must be at least 1, got %d", opts.Runs)
	}
	if len(opts.Rates) == 0 {
		return nil, errors.New("--rates must name at least one rate")
	}
	for _, b := range opts.Builds {
		for _, rate := range opts.Rates {
			if err := sweepConfig(opts.Base, rate, opts.Duration, b.Bin).Validate(); err != nil {
				return nil, fmt.Errorf("%s at %g/s: %w", b.Name, rate, err)
			}
		}
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	type key struct {
		build string
		rate  float64
	}
	reports := map[key][]*Report{}
	var failures []error
	for run := 1; run <= opts.Runs; run++ {
		for _, rate := range opts.Rates {
			for _, b := range opts.Builds {
				if ctx.Err() != nil {
					return nil, errors.Join(append(failures, ctx.Err())...)
				}
				fmt.Fprintf(opts.Log, "== %s at %g events/s, run %d/%d\n", b.Name, rate, run, opts.Runs)
				r, err := Run(ctx, sweepConfig(opts.Base, rate, opts.Duration, b.Bin), Options{Progress: opts.Progress, Stderr: opts.Stderr})
				if err != nil {
					failures = append(failures, fmt.Errorf("%s at %g/s run %d: %w", b.Name, rate, run, err))
				}
				if r != nil {
					reports[key{b.Name, rate}] = append(reports[key{b.Name, rate}], r)
				}
			}
		}
	}
	var points []SweepPoint
	for _, b := range opts.Builds {
		for _, rate := range opts.Rates {
			points = append(points, sweepPoint(b.Name, rate, reports[key{b.Name, rate}]))
		}
	}
	if err := writeSweep(opts.Out, points); err != nil {
		failures = append(failures, err)
	}
	return points, errors.Join(failures...)
}

// sweepPoint takes the medians of one build's runs at one rate.
func sweepPoint(build string, rate float64, runs []*Report) SweepPoint {
	p := SweepPoint{Build: build, Rate: rate, Runs: len(runs)}
	var p50, p99 []float64
	for _, r := range runs {
		if r.CPU != nil {
			p.CPUPerEventRuns = append(p.CPUPerEventRuns, r.CPU.PerEventMs)
		}
		if d := r.Deliveries; d != nil {
			p50, p99 = append(p50, d.Latency.P50Ms), append(p99, d.Latency.P99Ms)
			p.Lost += d.Lost
		}
	}
	p.CPUPerEventMs, p.P50Ms, p.P99Ms = Median(p.CPUPerEventRuns), Median(p50), Median(p99)
	return p
}

// writeSweep writes the points as JSON, a Markdown table and a plot.
func writeSweep(dir string, points []SweepPoint) error {
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	js, err := json.MarshalIndent(points, "", "  ")
	if err != nil {
		return err
	}
	var md strings.Builder
	WriteSweepTable(&md, points)
	var png strings.Builder
	if err := writeSweepPNG(&png, points); err != nil {
		return err
	}
	return errors.Join(
		os.WriteFile(filepath.Join(dir, "sweep.json"), append(js, '\n'), 0o644),
		os.WriteFile(filepath.Join(dir, "sweep.md"), []byte(md.String()), 0o644),
		os.WriteFile(filepath.Join(dir, "sweep.png"), []byte(png.String()), 0o644),
	)
}

// WriteSweepTable writes the points as a Markdown table.
func WriteSweepTable(w io.Writer, points []SweepPoint) {
	fmt.Fprintln(w, "| build | events/s | machine CPU per event (median; runs) | accepted→received p50 / p99 | lost |")
	fmt.Fprintln(w, "|---|---:|---|---|---:|")
	for _, p := range points {
		runs := make([]string, len(p.CPUPerEventRuns))
		for i, v := range p.CPUPerEventRuns {
			runs[i] = fmt.Sprintf("%.3f", v)
		}
		fmt.Fprintf(w, "| %s | %s | %.3f ms (%s) | %.2f / %.2f ms | %d |\n",
			p.Build, rateText(p.Rate), p.CPUPerEventMs, strings.Join(runs, ", "), p.P50Ms, p.P99Ms, p.Lost)
	}
}

var sweepColors = []color.Color{deliveredColor, acceptedColor, p99Color, p50Color}

// writeSweepPNG draws the cost per event against the rate (log scale),
// one line per build.
func writeSweepPNG(w io.Writer, points []SweepPoint) error {
	p := plot.New()
	p.Title.Text = "dispatch-load sweep: machine CPU per event"
	p.X.Label.Text = "events/s"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Label.Text = "ms of CPU per event"
	p.Y.Min = 0
	p.Y.Tick.Marker = plainTicks{}
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	var builds []string
	for _, pt := range points {
		if !slices.Contains(builds, pt.Build) {
			builds = append(builds, pt.Build)
		}
	}
	for i, b := range builds {
		var xys plotter.XYs
		for _, pt := range points {
			if pt.Build == b && pt.Runs > 0 {
				xys = append(xys, plotter.XY{X: pt.Rate, Y: pt.CPUPerEventMs})
			}
		}
		if len(xys) == 0 {
			continue
		}
		line, marks, err := plotter.NewLinePoints(xys)
		if err != nil {
			return fmt.Errorf("plot %s: %w", b, err)
		}
		c := sweepColors[i%len(sweepColors)]
		line.Color, line.Width = c, vg.Points(1.5)
		marks.Color, marks.Radius, marks.Shape = c, vg.Points(3), draw.CircleGlyph{}
		p.Add(line, marks)
		p.Legend.Add(b, line)
	}
	img := vgimg.New(vg.Points(640), vg.Points(400))
	p.Draw(draw.New(img))
	_, err := vgimg.PngCanvas{Canvas: img}.WriteTo(w)
	return err
}

// sweepMain is `dispatch-load sweep`.
func sweepMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	opts := SweepOptions{Base: baseConfig(), Duration: DefaultSweepDuration, Progress: stderr, Stderr: stderr, Log: stderr}
	fs := flag.NewFlagSet("dispatch-load sweep", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, `Usage: dispatch-load sweep [flags]

Runs W2's shape (one subscription, a receiver answering at once, every role
a process of the dispatch binary) at each rate, and reports the machine's
CPU per event (Dispatch's processes, PostgreSQL, Redis) and
accepted→received latency: the cost of an event at everyday rates. With
--baseline-bin, two builds take turns at every rate (an A/B).
Writes <out>/sweep.{json,md,png}.

Flags:
`)
		fs.PrintDefaults()
	}
	rates := "100,1000,5000"
	bin, baseline := "", ""
	fs.StringVar(&rates, "rates", rates, "comma-separated rates in events/s")
	fs.DurationVar(&opts.Duration, "duration", opts.Duration, "how long each rate is held")
	fs.IntVar(&opts.Runs, "runs", 1, "runs of each rate (and build); the table gives the median")
	fs.StringVar(&opts.Out, "out", "results", "folder for sweep.json, sweep.md and sweep.png")
	fs.StringVar(&bin, "dispatch-bin", "", "dispatch binary (default: go build it once)")
	fs.StringVar(&baseline, "baseline-bin", "", "a second dispatch binary, run in turn with --dispatch-bin at every rate")
	fs.StringVar(&opts.Base.DatabaseURL, "database-url", opts.Base.DatabaseURL, "PostgreSQL server for the runs' databases ($DATABASE_URL)")
	fs.StringVar(&opts.Base.RedisURL, "redis-url", opts.Base.RedisURL, "Redis for the runs ($REDIS_URL)")
	fs.StringVar(&opts.Base.Queue, "queue", opts.Base.Queue, "queue adapter, as DISPATCH_QUEUE (default: Dispatch's)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	var err error
	if opts.Rates, err = parseRates(rates); err != nil {
		fmt.Fprintf(stderr, "dispatch-load sweep: %v\n", err)
		return 2
	}
	if bin == "" {
		built, remove, err := BuildDispatch(ctx)
		if err != nil {
			fmt.Fprintf(stderr, "dispatch-load sweep: %v\n", err)
			return 1
		}
		defer remove()
		bin = built
	}
	if baseline != "" {
		opts.Builds = append(opts.Builds, SweepBuild{Name: "baseline", Bin: baseline})
	}
	opts.Builds = append(opts.Builds, SweepBuild{Name: "dispatch", Bin: bin})
	points, err := Sweep(ctx, opts)
	WriteSweepTable(stdout, points)
	if err != nil {
		fmt.Fprintf(stderr, "dispatch-load sweep: %v\n", err)
		return 1
	}
	return 0
}

// parseRates reads a --rates list: comma-separated events/s, each
// positive.
func parseRates(list string) ([]float64, error) {
	var rates []float64
	for _, r := range strings.Split(list, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(r), 64)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("--rates: %q is not a rate in events/s", r)
		}
		rates = append(rates, v)
	}
	return rates, nil
}
