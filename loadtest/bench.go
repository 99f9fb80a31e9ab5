package loadtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// BenchOptions configure the bench suite: every standard workload (or
// those in Only), Runs times each.
type BenchOptions struct {
	// Out is the folder the reports go to.
	Out string
	// Runs is how many times each workload runs; the summary quotes the
	// median.
	Runs int
	// Quick scales every workload down for development.
	Quick bool
	// Only, when not empty, names the workloads to run.
	Only []string
	// Base holds the deployment settings (database, Redis, binary, log
	// level) that every run starts from.
	Base Config
	// Command is the command line, quoted in the summary.
	Command string
	// Progress and Stderr are as in Options; Log receives a line per run.
	Progress, Stderr, Log io.Writer
}

// benchCase is one workload variant: W6 runs once per worker count.
type benchCase struct {
	name     string
	workload Workload
	cfg      Config
}

func benchCases(opts BenchOptions) ([]benchCase, error) {
	selected := Workloads
	if len(opts.Only) > 0 {
		selected = nil
		for _, name := range opts.Only {
			w, err := FindWorkload(name)
			if err != nil {
				return nil, err
			}
			selected = append(selected, w)
		}
	}
	var cases []benchCase
	for _, w := range selected {
		cfg := w.Configure(opts.Base, opts.Quick)
		if len(w.Variants) > 0 {
			for _, v := range w.Variants {
				c := cfg
				v.Apply(&c)
				name := w.Name + "-" + v.Name
				c.Workload = strings.Replace(c.Workload, w.Name, name, 1)
				cases = append(cases, benchCase{name: name, workload: w, cfg: c})
			}
			continue
		}
		if len(w.WorkerSweep) == 0 {
			cases = append(cases, benchCase{name: w.Name, workload: w, cfg: cfg})
			continue
		}
		for _, n := range w.WorkerSweep {
			c := cfg
			c.Workers = n
			c.Workload = variantName(cfg.Workload, n)
			cases = append(cases, benchCase{name: variantName(w.Name, n), workload: w, cfg: c})
		}
	}
	return cases, nil
}

// variantName names the variant of a workload with a WorkerSweep that runs
// workers worker processes: "W6-2w".
func variantName(workload string, workers int) string {
	return fmt.Sprintf("%s-%dw", workload, workers)
}

// benchStep is one run of a bench: cases[c], the run-th time.
type benchStep struct{ c, run int }

// benchSchedule orders the runs of cases: each workload's runs one after
// the other, except that the variants of one workload (W6's worker
// counts) take turns, run 1 of each, then run 2 of each, and so on. W6's
// target compares its variants with one another, and this machine's
// speed drifts within minutes: taking turns lets the drift fall on every
// variant alike instead of on whichever ran last.
func benchSchedule(cases []benchCase, runs int) []benchStep {
	var steps []benchStep
	for first := 0; first < len(cases); {
		end := first + 1
		for end < len(cases) && cases[end].workload.Name == cases[first].workload.Name {
			end++
		}
		for run := 1; run <= runs; run++ {
			for c := first; c < end; c++ {
				steps = append(steps, benchStep{c: c, run: run})
			}
		}
		first = end
	}
	return steps
}

// Bench runs the suite, writing <Out>/<case>-<run>.{json,md,png} and
// <Out>/summary.md. A failed run is reported in the summary and the
// suite goes on; the error lists every failure.
func Bench(ctx context.Context, opts BenchOptions) error {
	if opts.Runs < 1 {
		return fmt.Errorf("--runs must be at least 1, got %d", opts.Runs)
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	cases, err := benchCases(opts)
	if err != nil {
		return err
	}
	for _, c := range cases {
		if err := c.cfg.Validate(); err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
	}
	if err := os.MkdirAll(opts.Out, 0o755); err != nil {
		return err
	}
	if opts.Base.DispatchBin == "" && opts.Base.Target == "" {
		fmt.Fprintln(opts.Log, "building the dispatch binary for worker processes…")
		bin, remove, err := BuildDispatch(ctx)
		if err != nil {
			return err
		}
		defer remove()
		for i := range cases {
			cases[i].cfg.DispatchBin = bin
		}
	}
	results := make([][]*Report, len(cases))
	var failures []error
	for _, step := range benchSchedule(cases, opts.Runs) {
		c, run := cases[step.c], step.run
		if ctx.Err() != nil {
			return errors.Join(append(failures, ctx.Err())...)
		}
		fmt.Fprintf(opts.Log, "== %s run %d/%d: %s\n", c.name, run, opts.Runs, c.workload.Title)
		r, err := Run(ctx, c.cfg, Options{Progress: opts.Progress, Stderr: opts.Stderr})
		if err != nil {
			failures = append(failures, fmt.Errorf("%s run %d: %w", c.name, run, err))
			fmt.Fprintf(opts.Log, "%s run %d failed: %v\n", c.name, run, err)
		}
		if r == nil {
			continue
		}
		base := filepath.Join(opts.Out, fmt.Sprintf("%s-%d", c.name, run))
		if err := WriteFiles(r, base+".json", base+".md", base+".png"); err != nil {
			failures = append(failures, err)
		}
		results[step.c] = append(results[step.c], r)
		var md bytes.Buffer
		_ = r.WriteMarkdown(&md)
		_, _ = opts.Log.Write(md.Bytes())
		fmt.Fprintln(opts.Log)
	}
	summary, err := os.Create(filepath.Join(opts.Out, "summary.md"))
	if err != nil {
		return errors.Join(append(failures, err)...)
	}
	if err := writeSummary(summary, opts, cases, results); err != nil {
		failures = append(failures, err)
	}
	if err := summary.Close(); err != nil {
		failures = append(failures, err)
	}
	return errors.Join(failures...)
}

// WriteFiles writes r as JSON, Markdown and PNG to the paths that are not
// empty.
func WriteFiles(r *Report, jsonPath, mdPath, pngPath string) error {
	write := func(path string, render func(io.Writer) error) error {
		if path == "" {
			return nil
		}
		var buf bytes.Buffer
		if err := render(&buf); err != nil {
			return fmt.Errorf("render %s: %w", path, err)
		}
		if dir := filepath.Dir(path); dir != "." {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
		}
		return os.WriteFile(path, buf.Bytes(), 0o644)
	}
	return errors.Join(write(jsonPath, r.WriteJSON), write(mdPath, r.WriteMarkdown), write(pngPath, r.WritePNG))
}

// writeSummary writes the median of each figure over a case's runs.
func writeSummary(w io.Writer, opts BenchOptions, cases []benchCase, results [][]*Report) error {
	var b strings.Builder
	m := thisMachine()
	fmt.Fprintf(&b, "# dispatch-load bench: medians of %d run(s)\n\n", opts.Runs)
	fmt.Fprintf(&b, "Command: `%s`. Machine: %d CPU(s), %s, %s/%s, %s. Written %s.\n",
		opts.Command, m.CPUs, m.CPUModel, m.GOOS, m.GOARCH, m.GoVersion, time.Now().Format(time.RFC3339))
	fmt.Fprintf(&b, "Everything (PostgreSQL, Redis, Dispatch, receiver, load generator) on this one machine; api and scheduler run inside dispatch-load, workers as processes.\n\n")
	if opts.Quick {
		b.WriteString("**Quick mode: every workload scaled down; not the standard figures.**\n\n")
	}
	b.WriteString("| workload | runs | events accepted/s | publish p99 ms | deliveries/s (sustained) | e2e p50 / p90 / p99 / max ms | attempts/delivery | lost | duplicates | peak RSS MiB: largest worker / dispatch-load | CPU cores: machine / other | machine CPU per event, ms | target | verdict |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|\n")
	bench := map[string]figures{}
	for i, c := range cases {
		if f, ok := caseFigures(c.cfg.Workers, results[i]); ok {
			f.name = c.name
			bench[c.name] = f
		}
	}
	for i, c := range cases {
		rs := results[i]
		med := func(f func(*Report) float64) float64 {
			vs := make([]float64, 0, len(rs))
			for _, r := range rs {
				vs = append(vs, f(r))
			}
			return Median(vs)
		}
		deliveries := len(rs) > 0 && rs[0].Deliveries != nil
		cell := func(f func(*Report) float64, format func(float64) string) string {
			if !deliveries {
				return "–"
			}
			return format(med(f))
		}
		count := func(v float64) string { return thousands(int64(v + 0.5)) }
		latency := "–"
		if deliveries {
			latency = fmt.Sprintf("%s / %s / %s / %s",
				msText(med(func(r *Report) float64 { return r.Deliveries.Latency.P50Ms })),
				msText(med(func(r *Report) float64 { return r.Deliveries.Latency.P90Ms })),
				msText(med(func(r *Report) float64 { return r.Deliveries.Latency.P99Ms })),
				msText(med(func(r *Report) float64 { return r.Deliveries.Latency.MaxMs })))
		}
		cpu, perEvent := "–", "–"
		if len(rs) > 0 && rs[0].CPU != nil {
			cpu = fmt.Sprintf("%.2f / %.2f", med(func(r *Report) float64 { return r.CPU.Machine }), med(func(r *Report) float64 { return r.CPU.Other }))
			perEvent = fmt.Sprintf("%.3f", med(func(r *Report) float64 { return r.CPU.PerEventMs }))
			if rs[0].CPU.WithTool {
				perEvent += "*"
			}
		}
		judged := "no runs"
		if f, ok := bench[c.name]; ok {
			judged = c.workload.judge(f, bench)
		}
		if opts.Quick {
			judged = "not judged (quick)"
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			c.name, len(rs),
			rate(med(func(r *Report) float64 { return r.Publish.PerSecond })),
			msText(med(func(r *Report) float64 { return r.Publish.Latency.P99Ms })),
			cell(func(r *Report) float64 { return r.Deliveries.PerSecond }, func(v float64) string {
				return fmt.Sprintf("%s (%s)", count(v), count(med(func(r *Report) float64 { return r.Deliveries.SustainedPerSecond })))
			}),
			latency,
			cell(func(r *Report) float64 { return r.Deliveries.AttemptsPerDelivery }, func(v float64) string { return fmt.Sprintf("%.3f", v) }),
			cell(func(r *Report) float64 { return float64(r.Deliveries.Lost) }, count),
			cell(func(r *Report) float64 { return float64(r.Deliveries.Duplicates) }, count),
			fmt.Sprintf("%s / %.0f", rssText(med(workerRSS)), med(toolRSS)/(1<<20)),
			cpu, perEvent,
			c.workload.Target, judged)
	}
	b.WriteString("\nPer-run reports: `<workload>-<run>.json`, `.md` and `.png` beside this file. ")
	b.WriteString("Deliveries/s is deliveries over the time from the first publish to the last delivery; sustained is the median of the full seconds with deliveries. ")
	b.WriteString("CPU cores: how busy the whole machine was while each run measured, and how much of that was neither dispatch-load, its workers, its PostgreSQL backends nor Redis (other work on the machine skews every figure). ")
	b.WriteString("Machine CPU per event: Dispatch's processes, PostgreSQL and Redis over the events accepted; * marks runs whose api and scheduler ran inside dispatch-load, whose load generator and receiver are then counted too (--processes leaves them out). ")
	b.WriteString("Verdict: the medians held to the target (losses and peak RSS: the worst run); a target not met shows, for each condition it missed, the share of its bound reached.\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// workerRSS is the largest peak RSS of the run's worker processes; 0
// when the worker ran in process.
func workerRSS(r *Report) float64 {
	var m int64
	for _, p := range r.Memory {
		if strings.HasPrefix(p.Name, "worker") {
			m = max(m, p.PeakRSSBytes)
		}
	}
	return float64(m)
}

// toolRSS is the peak RSS of dispatch-load itself, which runs api and
// scheduler as well as the load generator and the receiver.
func toolRSS(r *Report) float64 {
	for _, p := range r.Memory {
		if strings.HasPrefix(p.Name, "dispatch-load") {
			return float64(p.PeakRSSBytes)
		}
	}
	return 0
}

func rssText(bytes float64) string {
	if bytes == 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f", bytes/(1<<20))
}
