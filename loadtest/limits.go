package loadtest

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"

	"github.com/dispatch-webhooks/dispatch/adapters/webhook"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// The component limits of this machine: what loopback HTTP, PostgreSQL
// and Redis manage on their own, with the same concurrency and payloads as
// the workloads, so the workload figures can be read against them. Each
// probe runs for a fixed time and counts completed operations.

// LimitsOptions configures `dispatch-load limits`.
type LimitsOptions struct {
	DatabaseURL string
	RedisURL    string
	Duration    time.Duration
	Concurrency int
	Payload     int
}

// Limit is one measured component figure.
type Limit struct {
	Name string
	Ops  int64
	Per  time.Duration
	// Busy is how many of the machine's cores were busy on average while
	// it was measured (0 where /proc/stat cannot be read).
	Busy  float64
	Notes string
}

// Rate is operations per second.
func (l Limit) Rate() float64 { return float64(l.Ops) / l.Per.Seconds() }

// MachineTime is what one operation cost the whole machine (every process
// involved, on every core), or 0 when Busy is unknown.
func (l Limit) MachineTime() time.Duration {
	if l.Ops == 0 || l.Busy == 0 {
		return 0
	}
	return time.Duration(l.Busy * float64(l.Per) / float64(l.Ops))
}

// MeasureLimits runs every probe in turn: the machine's and PostgreSQL's
// (see MeasureMachine), then the store's and Redis'.
func MeasureLimits(ctx context.Context, o LimitsOptions) ([]Limit, error) {
	out, err := MeasureMachine(ctx, o)
	if err != nil {
		return nil, err
	}
	store, err := probeStore(ctx, o)
	if err != nil {
		return nil, fmt.Errorf("dispatch's store: %w", err)
	}
	out = append(out, store...)
	rd, err := probeRedis(ctx, o)
	if err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	return append(out, rd...), nil
}

// MeasureMachine runs the probes of the machine and of its PostgreSQL
// server, none of which goes through Dispatch's store or Redis: loopback
// HTTP on the publish's and the webhook's paths, a system call, a round
// trip between two processes, and PostgreSQL's commits and batched rows.
// They say how fast the machine is at the moment, which drifts by more
// than most changes to Dispatch make.
func MeasureMachine(ctx context.Context, o LimitsOptions) ([]Limit, error) {
	http, err := probeHTTP(ctx, o)
	if err != nil {
		return nil, fmt.Errorf("loopback HTTP: %w", err)
	}
	hook, err := probeWebhookHTTP(ctx, o)
	if err != nil {
		return nil, fmt.Errorf("loopback HTTP, webhook path: %w", err)
	}
	system, err := probeOS(ctx, o)
	if err != nil {
		return nil, fmt.Errorf("operating system: %w", err)
	}
	pg, err := probePostgres(ctx, o)
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL: %w", err)
	}
	return append(append([]Limit{http, hook}, system...), pg...), nil
}

// errProbeDone ends a hammer goroutine quietly: its op has run out of
// work (a probe that consumes what an earlier phase made).
var errProbeDone = errors.New("probe out of work")

// hammer runs op from n goroutines for d and counts the operations op
// reports (an op may do several, e.g. a batch), and how busy the whole
// machine was meanwhile. Each goroutine first runs op once outside the
// measured window, so connections are set up before the clock starts. An
// op started within the window runs to its end and counts, and the
// measured time runs until the last one ended: on a slow machine a short
// window would otherwise cut every op of a heavy probe short and count
// none. The returned Limit has Ops, Per and Busy set.
func hammer(ctx context.Context, n int, d time.Duration, op func(ctx context.Context) (int, error)) (Limit, error) {
	var warm sync.WaitGroup
	warmErrs := make([]error, n)
	for i := range n {
		warm.Go(func() {
			if _, err := op(ctx); !errors.Is(err, errProbeDone) {
				warmErrs[i] = err
			}
		})
	}
	warm.Wait()
	if err := errors.Join(warmErrs...); err != nil {
		return Limit{}, err
	}
	window, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var done atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	busyBefore, busyErr := machineBusyTicks()
	start := time.Now()
	for range n {
		wg.Go(func() {
			for window.Err() == nil {
				k, err := op(ctx)
				if errors.Is(err, errProbeDone) {
					return
				}
				if err != nil {
					once.Do(func() { firstErr = err; cancel() })
					return
				}
				done.Add(int64(k))
			}
		})
	}
	wg.Wait()
	l := Limit{Ops: done.Load(), Per: time.Since(start)}
	if busyAfter, err := machineBusyTicks(); err == nil && busyErr == nil {
		l.Busy = float64(busyAfter-busyBefore) / clockTicks / l.Per.Seconds()
	}
	return l, firstErr
}

// probeHTTP: Concurrency keep-alive clients POST Payload bytes to a
// net/http server on 127.0.0.1 that reads the body and answers 204: Go's
// standard HTTP stack on this machine's loopback, a gauge of the machine
// kept the same from bench to bench so that their figures compare.
func probeHTTP(ctx context.Context, o LimitsOptions) (Limit, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return Limit{}, err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	transport := &http.Transport{MaxIdleConns: o.Concurrency, MaxIdleConnsPerHost: o.Concurrency}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport}
	body := bytes.Repeat([]byte("x"), o.Payload)
	target := "http://" + ln.Addr().String() + "/"
	l, err := hammer(ctx, o.Concurrency, o.Duration, func(ctx context.Context) (int, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
		if err != nil {
			return 0, err
		}
		res, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return 1, nil
	})
	l.Name = limitHTTP
	l.Notes = fmt.Sprintf("net/http, %d keep-alive clients, %d B body, 204 answer", o.Concurrency, o.Payload)
	return l, err
}

// probeWebhookHTTP: Concurrency goroutines send Payload bytes through
// Dispatch's webhook sender to a fasthttp server on 127.0.0.1 that answers
// 204, as the worker sends to the run's receiver: the floor of every
// webhook a workload delivers.
func probeWebhookHTTP(ctx context.Context, o LimitsOptions) (Limit, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return Limit{}, err
	}
	srv := &fasthttp.Server{
		Handler:       func(ctx *fasthttp.RequestCtx) { ctx.SetStatusCode(fasthttp.StatusNoContent) },
		NoDefaultDate: true, NoDefaultServerHeader: true,
	}
	go func() { _ = srv.Serve(ln) }()
	defer func() { _ = srv.Shutdown() }()
	sender := webhook.NewSender(webhook.SenderOptions{Policy: webhook.Policy{AllowPrivate: true}, MaxConnsPerHost: o.Concurrency})
	defer sender.CloseIdleConnections()
	req := ports.WebhookRequest{
		URL:    "http://" + ln.Addr().String() + "/",
		Header: http.Header{"Content-Type": {"application/json"}},
		Body:   bytes.Repeat([]byte("x"), o.Payload),
	}
	l, err := hammer(ctx, o.Concurrency, o.Duration, func(ctx context.Context) (int, error) {
		res, err := sender.Send(ctx, req)
		if err != nil {
			return 0, err
		}
		if res.StatusCode != http.StatusNoContent {
			return 0, fmt.Errorf("answered %d", res.StatusCode)
		}
		return 1, nil
	})
	l.Name = limitWebhookHTTP
	l.Notes = fmt.Sprintf("Dispatch's webhook sender (fasthttp's client) to fasthttp's server, %d senders, %d B body, 204 answer", o.Concurrency, o.Payload)
	return l, err
}

// probePostgres measures, in a database of its own: one-row INSERT
// commits with synchronous_commit on (what a naive ingest pays per event),
// the same with synchronous_commit off (the worker's setting), and rows
// per second of 500-row multi-row INSERTs (what group commit approaches).
func probePostgres(ctx context.Context, o LimitsOptions) ([]Limit, error) {
	dsn, drop, err := scratchDatabase(ctx, o)
	if err != nil {
		return nil, err
	}
	defer drop()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = int32(min(o.Concurrency, 16))
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `CREATE TABLE probe (id bigserial PRIMARY KEY, data bytea NOT NULL, created_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return nil, err
	}
	payload := bytes.Repeat([]byte("x"), o.Payload)
	var out []Limit
	for _, sync := range []string{"on", "off"} {
		// One statement, one round trip: the session's setting decides
		// whether its commit waits for the WAL flush.
		scfg := cfg.Copy()
		scfg.ConnConfig.RuntimeParams["synchronous_commit"] = sync
		spool, err := pgxpool.NewWithConfig(ctx, scfg)
		if err != nil {
			return nil, err
		}
		l, err := hammer(ctx, int(cfg.MaxConns), o.Duration, func(ctx context.Context) (int, error) {
			_, err := spool.Exec(ctx, `INSERT INTO probe (data) VALUES ($1)`, payload)
			return 1, err
		})
		spool.Close()
		if err != nil {
			return nil, err
		}
		l.Name = "PostgreSQL one-row commits/s, synchronous_commit " + sync
		l.Notes = fmt.Sprintf("%d connections, %d B row, one INSERT per transaction", cfg.MaxConns, o.Payload)
		out = append(out, l)
	}
	const batch = 500
	rows := make([][]byte, batch)
	for i := range rows {
		rows[i] = payload
	}
	l, err := hammer(ctx, 2, o.Duration, func(ctx context.Context) (int, error) {
		_, err := pool.Exec(ctx, `INSERT INTO probe (data) SELECT unnest($1::bytea[])`, rows)
		return batch, err
	})
	if err != nil {
		return nil, err
	}
	l.Name = limitBareInsert
	l.Notes = fmt.Sprintf("2 writers, synchronous_commit on, %d B rows, one primary key", o.Payload)
	out = append(out, l)
	bare, err := probeBareDeliveries(ctx, pool, o)
	if err != nil {
		return nil, err
	}
	return append(out, bare), nil
}

// scratchDatabase creates a database of its own on o's server, as a load
// run does; drop drops it.
func scratchDatabase(ctx context.Context, o LimitsOptions) (dsn string, drop func(), err error) {
	d := &deployment{}
	drop = func() { _ = d.stop(context.WithoutCancel(ctx)) }
	if dsn, err = d.createDatabase(ctx, o.DatabaseURL, "dispatch_limits_"+randomHex(6)); err != nil {
		drop()
		return "", nil, err
	}
	return dsn, drop, nil
}

// probeRedis measures XADD round trips one at a time from Concurrency
// clients, and XADDs pipelined 100 at a time.
func probeRedis(ctx context.Context, o LimitsOptions) ([]Limit, error) {
	opts, err := goredis.ParseURL(o.RedisURL)
	if err != nil {
		return nil, err
	}
	opts.PoolSize = o.Concurrency
	client := goredis.NewClient(opts)
	defer client.Close()
	key := "dispatch-load:limits:" + randomHex(6)
	defer client.Del(context.WithoutCancel(ctx), key)
	body := strings.Repeat("x", 26) // a delivery id
	single, err := hammer(ctx, o.Concurrency, o.Duration, func(ctx context.Context) (int, error) {
		return 1, client.XAdd(ctx, &goredis.XAddArgs{Stream: key, MaxLen: 10000, Approx: true, Values: []string{"b", body}}).Err()
	})
	if err != nil {
		return nil, err
	}
	piped, err := hammer(ctx, 4, o.Duration, func(ctx context.Context) (int, error) {
		p := client.Pipeline()
		for range 100 {
			p.XAdd(ctx, &goredis.XAddArgs{Stream: key, MaxLen: 10000, Approx: true, Values: []string{"b", body}})
		}
		_, err := p.Exec(ctx)
		return 100, err
	})
	if err != nil {
		return nil, err
	}
	single.Name, single.Notes = "Redis XADD round trips/s", fmt.Sprintf("%d clients, one command each", o.Concurrency)
	piped.Name, piped.Notes = "Redis XADD/s pipelined", "4 clients, 100 commands per pipeline"
	return []Limit{single, piped}, nil
}

// WriteLimits prints the figures as a Markdown table.
func WriteLimits(w io.Writer, o LimitsOptions, limits []Limit) error {
	var b strings.Builder
	fmt.Fprintf(&b, "### component limits — %s each\n\n| component | figure | machine busy | machine time per operation | setup |\n|---|---:|---:|---:|---|\n", o.Duration)
	for _, l := range limits {
		fmt.Fprintf(&b, "| %s | %s | %.2f cores | %.1f µs | %s |\n", l.Name, thousands(int64(l.Rate()+0.5)), l.Busy,
			float64(l.MachineTime())/float64(time.Microsecond), l.Notes)
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	return writeCeilings(w, limits, float64(runtime.NumCPU()))
}

// defaultLimits are the probes' settings unless flags say otherwise: the
// workloads' 64 publishers and 1 KiB payloads.
func defaultLimits(base Config) LimitsOptions {
	return LimitsOptions{DatabaseURL: base.DatabaseURL, RedisURL: base.RedisURL, Duration: 5 * time.Second, Concurrency: 64, Payload: 1024}
}

func limitsMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o := defaultLimits(baseConfig())
	fs := flag.NewFlagSet("dispatch-load limits", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.DatabaseURL, "database-url", o.DatabaseURL, "PostgreSQL server to measure (a scratch database is created and dropped)")
	fs.StringVar(&o.RedisURL, "redis-url", o.RedisURL, "Redis to measure (one scratch key, deleted)")
	fs.DurationVar(&o.Duration, "duration", o.Duration, "how long each probe runs")
	fs.IntVar(&o.Concurrency, "concurrency", o.Concurrency, "concurrent clients of the HTTP and Redis round-trip probes")
	fs.IntVar(&o.Payload, "payload", o.Payload, "bytes per HTTP body and PostgreSQL row")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if o.Duration <= 0 || o.Concurrency < 1 || o.Payload < 1 {
		fmt.Fprintln(stderr, "dispatch-load limits: --duration, --concurrency and --payload must be positive")
		return 2
	}
	limits, err := MeasureLimits(ctx, o)
	if err != nil {
		fmt.Fprintln(stderr, "dispatch-load limits:", err)
		return 1
	}
	if err := WriteLimits(stdout, o, limits); err != nil {
		return 1
	}
	return 0
}
