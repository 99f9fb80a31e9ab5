package loadtest

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

const usage = `dispatch-load measures Dispatch: events accepted/s, deliveries/s,
accepted→received latency, attempts, losses, duplicates and peak memory.

Usage:
  dispatch-load [flags]                    one run (default: 1,000 events, 1 subscription)
  dispatch-load --workload W3 [flags]      one standard workload; flags given override it
  dispatch-load bench [bench flags]        every standard workload, 3 runs each, into results/
  dispatch-load sweep [sweep flags]        CPU per event and latency at 100, 1,000 and 5,000 events/s
  dispatch-load floor [floor flags]        CPU per event of the two HTTP exchanges alone (no storage, no queue)

Without --target it starts Dispatch itself: a fresh database on the
PostgreSQL server of --database-url (dropped at the end), a Redis key prefix
of its own (deleted at the end), migrations, api and scheduler inside this
process, and --workers worker processes of the dispatch binary.

Standard workloads (SPEC §6; --quick scales them down):
%s
Flags:
`

// Main runs the command line and returns the exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if len(args) > 0 && args[0] == "bench" {
		return benchMain(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "sweep" {
		return sweepMain(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "floor" {
		return floorMain(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == floorRelayArg {
		return floorRelayMain(args[1:], stdout, stderr)
	}
	return runMain(ctx, args, stdout, stderr)
}

func workloadList() string {
	var b strings.Builder
	for _, w := range Workloads {
		fmt.Fprintf(&b, "  %-3s %s\n      target: %s\n", w.Name, w.Title, w.Target)
	}
	return b.String()
}

// baseConfig is DefaultConfig with DATABASE_URL, REDIS_URL, NATS_URL and
// KAFKA_BROKERS from the environment.
func baseConfig() Config {
	c := DefaultConfig()
	for env, p := range map[string]*string{"DATABASE_URL": &c.DatabaseURL, "REDIS_URL": &c.RedisURL, "NATS_URL": &c.NATSURL, "KAFKA_BROKERS": &c.KafkaBrokers} {
		if v := os.Getenv(env); v != "" {
			*p = v
		}
	}
	return c
}

type runFlags struct {
	workload           string
	quick              bool
	jsonPath, plotPath string
	mdPath             string
	cpuProfile         string
	memProfile         string
}

func newRunFlagSet(cfg *Config, rf *runFlags, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("dispatch-load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, usage, workloadList())
		fs.PrintDefaults()
	}
	fs.StringVar(&rf.workload, "workload", "", "start from standard workload W1…W6")
	fs.BoolVar(&rf.quick, "quick", false, "scale the workload down for development")
	fs.StringVar(&rf.jsonPath, "json", "", "write the report as JSON to this file")
	fs.StringVar(&rf.mdPath, "md", "", "also write the Markdown table to this file")
	fs.StringVar(&rf.plotPath, "plot", "", "write a PNG plot of throughput and latency over time to this file")
	fs.StringVar(&rf.cpuProfile, "cpuprofile", "", "write a CPU profile of this process (generator, receiver, in-process roles; use --workers 0 to include the worker) over the measured window to this file")
	fs.StringVar(&rf.memProfile, "memprofile", "", "write a profile of this process's allocations (as --cpuprofile; since the process started, so setup included) at the end of the measured window to this file")
	cfg.Flags(fs)
	return fs
}

// parseRun reads a run's command line: the workload's settings first,
// then the flags given, which override them.
func parseRun(args []string, stderr io.Writer) (Config, runFlags, error) {
	// Parse twice: once to find the workload, then onto its settings.
	var scratch Config
	var rf runFlags
	if err := newRunFlagSet(&scratch, &rf, stderr).Parse(args); err != nil {
		return Config{}, rf, flagError{err}
	}
	cfg := baseConfig()
	if rf.workload != "" {
		w, err := FindWorkload(rf.workload)
		if err != nil {
			return Config{}, rf, err
		}
		cfg = w.Configure(cfg, rf.quick)
	}
	fs := newRunFlagSet(&cfg, &rf, io.Discard) // the first pass reported any error
	if err := fs.Parse(args); err != nil {
		return Config{}, rf, flagError{err}
	}
	if fs.NArg() > 0 {
		return Config{}, rf, fmt.Errorf("unexpected argument %q (the bench suite is `dispatch-load bench`)", fs.Arg(0))
	}
	// --duration without --events publishes for the duration, not until
	// the default event count runs out first.
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["duration"] && !set["events"] && rf.workload == "" {
		cfg.Events = 0
	}
	return cfg, rf, cfg.Validate()
}

// flagError is a command-line error the flag package has already printed.
type flagError struct{ err error }

func (e flagError) Error() string { return e.err.Error() }
func (e flagError) Unwrap() error { return e.err }

func runMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, rf, err := parseRun(args, stderr)
	var printed flagError
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &printed):
		return 2
	case err != nil:
		fmt.Fprintf(stderr, "dispatch-load: %v\n", err)
		return 2
	}
	opts := Options{Progress: stderr, Stderr: stderr}
	for _, profile := range []struct {
		path string
		to   *io.Writer
	}{{rf.cpuProfile, &opts.CPUProfile}, {rf.memProfile, &opts.MemProfile}} {
		if profile.path == "" {
			continue
		}
		f, err := os.Create(profile.path)
		if err != nil {
			fmt.Fprintf(stderr, "dispatch-load: %v\n", err)
			return 1
		}
		defer func() {
			if err := f.Close(); err != nil {
				fmt.Fprintf(stderr, "dispatch-load: %v\n", err)
			}
		}()
		*profile.to = f
	}
	r, err := Run(ctx, cfg, opts)
	if r != nil {
		if werr := WriteFiles(r, rf.jsonPath, rf.mdPath, rf.plotPath); werr != nil {
			err = errors.Join(err, werr)
		}
		_ = r.WriteMarkdown(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "dispatch-load: %v\n", err)
		return 1
	}
	return 0
}

func benchMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	opts := BenchOptions{Base: baseConfig(), Progress: stderr, Stderr: stderr, Log: stdout}
	fs := flag.NewFlagSet("dispatch-load bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: dispatch-load bench [flags]\n\nRuns the standard workloads and writes <out>/<workload>-<run>.{json,md,png} and <out>/summary.md.\n\n%s\nFlags:\n", workloadList())
		fs.PrintDefaults()
	}
	only := ""
	fs.StringVar(&opts.Out, "out", "results", "folder for the reports")
	fs.IntVar(&opts.Runs, "runs", 3, "runs of each workload; the summary quotes the median")
	fs.BoolVar(&opts.Quick, "quick", false, "scale every workload down for development")
	fs.StringVar(&only, "only", "", "comma-separated workloads to run (default: all)")
	fs.StringVar(&opts.Base.DatabaseURL, "database-url", opts.Base.DatabaseURL, "PostgreSQL server for the runs' databases ($DATABASE_URL)")
	fs.StringVar(&opts.Base.RedisURL, "redis-url", opts.Base.RedisURL, "Redis for the runs ($REDIS_URL)")
	fs.StringVar(&opts.Base.Queue, "queue", opts.Base.Queue, "queue adapter of the roles started, as DISPATCH_QUEUE (default: Dispatch's)")
	fs.IntVar(&opts.Base.QueuePartitions, "queue-partitions", opts.Base.QueuePartitions, "DISPATCH_QUEUE_PARTITIONS of the roles started (0: Dispatch's default)")
	fs.StringVar(&opts.Base.NATSURL, "nats-url", opts.Base.NATSURL, "NATS server of --queue nats ($NATS_URL)")
	fs.StringVar(&opts.Base.KafkaBrokers, "kafka-brokers", opts.Base.KafkaBrokers, "comma-separated Kafka seed brokers of --queue kafka ($KAFKA_BROKERS)")
	fs.StringVar(&opts.Base.DispatchBin, "dispatch-bin", "", "dispatch binary for worker processes (default: go build it once)")
	fs.StringVar(&opts.Base.LogLevel, "log-level", opts.Base.LogLevel, "log level of the Dispatch roles started")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if only != "" {
		opts.Only = strings.Split(only, ",")
	}
	opts.Command = strings.TrimSpace("dispatch-load bench " + strings.Join(args, " "))
	if err := Bench(ctx, opts); err != nil {
		fmt.Fprintf(stderr, "dispatch-load bench: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "summary: %s\n", opts.Out+"/summary.md")
	return 0
}
