package loadtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
)

// dispatchAPI is what a run needs from Dispatch's API; client.go
// implements it with the generated client.
type dispatchAPI interface {
	// CreateSubscription creates a subscription as s says and returns its
	// id and signing secret.
	CreateSubscription(ctx context.Context, s subscriptionSpec) (id, secret string, err error)
	// DeleteSubscription deletes subscription id.
	DeleteSubscription(ctx context.Context, id string) error
	// Publish sends one publish request with body (a JSON event) and
	// returns the accepted event's id; any answer but 202 is an error
	// whose text names the status.
	Publish(ctx context.Context, body []byte) (id string, err error)
	// Connect opens about n keep-alive connections to the API, so that
	// the publishers do not dial them on the clock.
	Connect(ctx context.Context, n int) error
	// Close releases idle connections.
	Close()
}

// subscriptionSpec is a subscription the tool creates.
type subscriptionSpec struct {
	URL         string
	EventTypes  []string
	MaxInFlight int
	RateLimit   int
	// Timeout is 0 for Dispatch's default.
	Timeout time.Duration
}

// Options are the run's surroundings, apart from the workload.
type Options struct {
	// Progress receives a progress line every second; nil for none.
	Progress io.Writer
	// Stderr receives the logs of the worker processes; nil discards them.
	Stderr io.Writer
	// CPUProfile, when set, receives a pprof CPU profile of this process
	// (load generator, receiver and the roles run in process) over the
	// measured window.
	CPUProfile io.Writer
	// MemProfile, when set, receives a pprof profile of this process's
	// allocations (since it started) at the end of the measured window.
	MemProfile io.Writer
}

// Run executes one run of cfg and reports what it measured. With no
// Target it starts a deployment (and tears it down, database and Redis
// keys included); with Workers > 0 and no DispatchBin it builds the
// dispatch binary first.
func Run(ctx context.Context, cfg Config, opts Options) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.Stderr == nil {
		opts.Stderr = io.Discard
	}
	accepted := newAcceptedLog()
	rcv, err := NewReceiver(cfg.Subscriptions, cfg, accepted)
	if err != nil {
		return nil, err
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = rcv.Close(closeCtx)
	}()

	baseURL, apiKey := cfg.Target, cfg.APIKey
	var dep *deployment
	if cfg.Target == "" {
		bin := cfg.DispatchBin
		if cfg.Workers > 0 && bin == "" {
			path, remove, err := BuildDispatch(ctx)
			if err != nil {
				return nil, err
			}
			defer remove()
			bin = path
		}
		dep, err = startDeployment(ctx, cfg, bin, opts.Stderr)
		if err != nil {
			return nil, err
		}
		baseURL, apiKey = dep.baseURL, dep.apiKey
	}
	api, err := newClientAPI(baseURL, apiKey, cfg.Publishers)
	if err != nil {
		return nil, errors.Join(err, stopDeployment(dep))
	}
	defer api.Close()

	probe := func(context.Context) cpuGroups { return cpuGroups{tool: []int{os.Getpid()}} }
	var sample probeFunc
	if dep != nil {
		probe = dep.cpuGroups
		if cfg.SampleEvery > 0 {
			conn, err := dep.connect(ctx)
			if err != nil {
				return nil, errors.Join(err, stopDeployment(dep))
			}
			defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
			sample = func(ctx context.Context) ([]TableSize, []ProcessRSS, error) {
				rss := dep.rss()
				tables, err := tableSizes(ctx, conn, SoakTables)
				return tables, rss, err
			}
		}
	}
	report, runErr := measure(ctx, cfg, api, rcv, accepted, probe, sample, opts)
	if dep != nil {
		if report != nil {
			report.Memory = dep.memory()
		}
		runErr = errors.Join(runErr, stopDeployment(dep))
	}
	if report != nil && cfg.Target != "" {
		report.Notes = append(report.Notes, "peak RSS not measured: the deployment was started by someone else (--target)")
	}
	return report, runErr
}

func stopDeployment(d *deployment) error {
	if d == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return d.stop(ctx)
}

// measure creates the subscriptions, publishes, waits for the deliveries
// and builds the report. Subscriptions it created are deleted again.
func measure(ctx context.Context, cfg Config, api dispatchAPI, rcv *Receiver, accepted *acceptedLog,
	probe func(context.Context) cpuGroups, sample probeFunc, opts Options,
) (*Report, error) {
	var subIDs []string
	defer func() {
		if cfg.Target == "" {
			return // the whole deployment goes
		}
		cleanCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = forEachConcurrently(len(subIDs), cfg.Publishers, func(i int) error {
			_ = api.DeleteSubscription(cleanCtx, subIDs[i])
			return nil
		})
	}()
	for i := range cfg.Subscriptions {
		id, secret, err := api.CreateSubscription(ctx, subscriptionSpec{
			URL: rcv.URL(i), EventTypes: LoadEventTypes, MaxInFlight: cfg.MaxInFlight, RateLimit: cfg.RateLimit,
			Timeout: cfg.SubscriptionTimeout,
		})
		if err != nil {
			return nil, fmt.Errorf("create subscription %d: %w", i, err)
		}
		subIDs = append(subIDs, id)
		if err := rcv.SetSecret(i, secret); err != nil {
			return nil, err
		}
	}
	idle, err := createIdle(ctx, cfg, api, rcv)
	subIDs = append(subIDs, idle...)
	if err != nil {
		return nil, err
	}

	// A producer publishing 1,000 events a second has its connections
	// open; dialled on the clock, 32 or 64 at once, they were part of the
	// first publishes' latency, and of the first deliveries'.
	if err := api.Connect(ctx, cfg.Publishers); err != nil {
		return nil, fmt.Errorf("connect the publishers: %w", err)
	}
	startGroups := probe(ctx)
	cpuStart := takeCPUSample(startGroups)
	if opts.CPUProfile != nil {
		if err := pprof.StartCPUProfile(opts.CPUProfile); err != nil {
			return nil, fmt.Errorf("CPU profile: %w", err)
		}
	}
	started := time.Now()
	pubs := newPublishers(cfg, api, accepted, started)
	progress := startProgress(opts.Progress, cfg, started, pubs, rcv)
	var samples *sampler
	if sample != nil {
		samples = startSampling(ctx, cfg.SampleEvery, started, rcv, sample)
	}
	pubs.run(ctx)
	publishEnded := time.Now()

	drainEnded := ""
	if cfg.Subscriptions > 0 {
		progress.setPhase("draining")
		drainEnded = drain(ctx, cfg, rcv, pubs.accepted.Load()*int64(cfg.Healthy()), publishEnded)
	}
	progress.stop()
	var soak []SoakSample
	if samples != nil {
		soak = samples.stop()
	}
	if opts.CPUProfile != nil {
		pprof.StopCPUProfile()
	}
	if opts.MemProfile != nil {
		if err := pprof.Lookup("allocs").WriteTo(opts.MemProfile, 0); err != nil {
			return nil, fmt.Errorf("allocation profile: %w", err)
		}
	}
	cpuEnd := takeCPUSample(startGroups.union(probe(context.WithoutCancel(ctx))))

	r := buildReport(cfg, started, pubs, rcv, accepted)
	r.Samples = soak
	if use := cpuBetween(cpuStart, cpuEnd); use.Seconds > 0 {
		use.perEvent(r.Publish.Accepted, !cfg.Processes)
		r.CPU = &use
	}
	if r.Deliveries != nil {
		r.Deliveries.DrainEnded = drainEnded
	}
	if ctx.Err() != nil {
		return r, fmt.Errorf("interrupted: %w", ctx.Err())
	}
	return r, nil
}

// idleEventTypes is the event type of idle subscriptions: no event of a
// run has it.
var idleEventTypes = []string{"idle.never"}

// createIdle creates cfg.IdleSubscriptions subscriptions that match no
// event of the run, cfg.Publishers at a time, and returns the ids of those
// it created.
func createIdle(ctx context.Context, cfg Config, api dispatchAPI, rcv *Receiver) ([]string, error) {
	ids := make([]string, cfg.IdleSubscriptions)
	err := forEachConcurrently(cfg.IdleSubscriptions, cfg.Publishers, func(i int) error {
		id, _, err := api.CreateSubscription(ctx, subscriptionSpec{
			URL: rcv.URL(0), EventTypes: idleEventTypes, MaxInFlight: cfg.MaxInFlight, RateLimit: cfg.RateLimit,
		})
		if err != nil {
			return fmt.Errorf("create idle subscription %d: %w", i, err)
		}
		ids[i] = id
		return nil
	})
	return slices.DeleteFunc(ids, func(id string) bool { return id == "" }), err
}

// forEachConcurrently calls fn(0) … fn(n-1), at most width at once, and
// returns the first error; after an error it starts no more calls.
func forEachConcurrently(n, width int, fn func(i int) error) error {
	var g errgroup.Group
	g.SetLimit(max(width, 1))
	failed := make(chan struct{})
	var once sync.Once
	for i := range n {
		select {
		case <-failed:
			return g.Wait()
		default:
		}
		g.Go(func() error {
			err := fn(i)
			if err != nil {
				once.Do(func() { close(failed) })
			}
			return err
		})
	}
	return g.Wait()
}

// drain waits until every expected delivery has arrived, nothing has
// arrived for DrainStall, DrainTimeout has passed, or ctx ends.
func drain(ctx context.Context, cfg Config, rcv *Receiver, expected int64, since time.Time) string {
	deadline := since.Add(cfg.DrainTimeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if rcv.delivered.Load() >= expected {
			return "all delivered"
		}
		now := time.Now()
		last := time.Unix(0, rcv.lastOK.Load())
		if last.Before(since) {
			last = since
		}
		switch {
		case now.After(deadline):
			return "timeout"
		case now.Sub(last) > cfg.DrainStall:
			return "stalled"
		}
		select {
		case <-ctx.Done():
			return "interrupted"
		case <-tick.C:
		}
	}
}

// publishers send events from Publishers goroutines, paced to Rate when
// it is set, until Events are sent or PublishLimit has passed.
type publishers struct {
	cfg      Config
	api      dispatchAPI
	log      *acceptedLog
	started  time.Time
	pad      string
	next     atomic.Int64
	sent     atomic.Int64
	accepted atomic.Int64
	failed   atomic.Int64

	mu        sync.Mutex
	latencies []time.Duration
	times     []time.Time
	errors    map[string]int64
}

func newPublishers(cfg Config, api dispatchAPI, log *acceptedLog, started time.Time) *publishers {
	// {"seq":1234567,"pad":"…"} is PayloadBytes long for seven-digit
	// sequence numbers: 17 bytes of syntax and names.
	padLen := max(cfg.PayloadBytes-17-7, 0)
	pad := make([]byte, padLen)
	for i := range pad {
		pad[i] = 'a' + byte(i%26)
	}
	return &publishers{cfg: cfg, api: api, log: log, started: started, pad: string(pad), errors: map[string]int64{}}
}

func (p *publishers) run(ctx context.Context) {
	ctx, cancel := context.WithDeadline(ctx, p.started.Add(p.cfg.PublishLimit()))
	defer cancel()
	var wg sync.WaitGroup
	for range p.cfg.Publishers {
		wg.Add(1)
		go func() { defer wg.Done(); p.publisher(ctx) }()
	}
	wg.Wait()
}

func (p *publishers) publisher(ctx context.Context) {
	var (
		latencies []time.Duration
		times     []time.Time
		errs      = map[string]int64{}
		body      []byte
	)
	defer func() {
		p.mu.Lock()
		p.latencies = append(p.latencies, latencies...)
		p.times = append(p.times, times...)
		for k, v := range errs {
			p.errors[k] += v
		}
		p.mu.Unlock()
	}()
	for ctx.Err() == nil {
		seq := p.next.Add(1) - 1
		if p.cfg.Events > 0 && seq >= int64(p.cfg.Events) {
			return
		}
		if p.cfg.Rate > 0 {
			due := p.started.Add(time.Duration(float64(seq) / p.cfg.Rate * float64(time.Second)))
			if wait := time.Until(due); wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
			}
		}
		body = p.event(body[:0], seq)
		sent := time.Now()
		p.sent.Add(1)
		id, err := p.api.Publish(ctx, body)
		now := time.Now()
		if err != nil {
			if ctx.Err() != nil {
				// Cut off by the time limit: neither accepted nor failed.
				p.sent.Add(-1)
				return
			}
			p.failed.Add(1)
			errs[errorKind(err)]++
			continue
		}
		p.log.add(id, now)
		p.accepted.Add(1)
		latencies = append(latencies, now.Sub(sent))
		times = append(times, now)
	}
}

// event appends the publish body of event seq to b.
func (p *publishers) event(b []byte, seq int64) []byte {
	b = append(b, `{"type":"`+EventType+`","source":"dispatch-load","data":{"seq":`...)
	b = strconv.AppendInt(b, seq, 10)
	b = append(b, `,"pad":"`...)
	b = append(b, p.pad...)
	return append(b, `"}}`...)
}

// errorKind shortens a publish error to a key for counting: the first 80
// characters of its message.
func errorKind(err error) string {
	s := err.Error()
	if len(s) > 80 {
		s = s[:80] + "…"
	}
	return s
}

// buildReport turns what the publishers and the receiver recorded into a
// report.
func buildReport(cfg Config, started time.Time, pubs *publishers, rcv *Receiver, accepted *acceptedLog) *Report {
	pubs.mu.Lock()
	defer pubs.mu.Unlock()
	r := &Report{Workload: cfg.Workload, Config: cfg, Machine: thisMachine(), Started: started}
	lastAccepted := started
	for _, t := range pubs.times {
		if t.After(lastAccepted) {
			lastAccepted = t
		}
	}
	r.PublishSeconds = lastAccepted.Sub(started).Seconds()
	r.Publish = PublishStats{
		Sent: pubs.sent.Load(), Accepted: pubs.accepted.Load(), Failed: pubs.failed.Load(),
		Latency: Summarise(slices.Clone(pubs.latencies)), // pubs.latencies stays in step with pubs.times
	}
	if len(pubs.errors) > 0 {
		r.Publish.Errors = pubs.errors
	}
	if r.PublishSeconds > 0 {
		r.Publish.PerSecond = float64(r.Publish.Accepted) / r.PublishSeconds
	}

	var delivered []Sample
	if cfg.Subscriptions > 0 {
		d := &DeliveryStats{
			Expected:         r.Publish.Accepted * int64(cfg.Healthy()),
			Hung:             rcv.hung.Load(),
			Requests:         rcv.requests.Load() - rcv.unknown.Load(),
			FailedByReceiver: rcv.failed.Load(),
			Unexpected:       rcv.unknown.Load(),
			Verified:         rcv.verified.Load(),
			BadSignatures:    rcv.badSignature.Load(),
		}
		if msg := rcv.firstBadSig.Load(); msg != nil {
			d.FirstBadSig = *msg
		}
		seen := map[pair]bool{}
		var latencies []time.Duration
		lastDelivered := started
		for _, a := range rcv.snapshot() {
			if !a.ok {
				continue
			}
			p := pair{a.eventID, a.sub}
			if seen[p] {
				d.Duplicates++
				continue
			}
			seen[p] = true
			at, ok := accepted.get(a.eventID)
			if !ok {
				d.Unexpected++
				continue
			}
			latency := a.at.Sub(at)
			if latency < 0 {
				d.EarlyArrivals++
				latency = 0
			}
			d.Delivered++
			latencies = append(latencies, latency)
			delivered = append(delivered, Sample{At: a.at, Latency: latency})
			if a.at.After(lastDelivered) {
				lastDelivered = a.at
			}
		}
		d.Lost = d.Expected - d.Delivered
		if d.Delivered > 0 {
			d.AttemptsPerDelivery = float64(d.Requests) / float64(d.Delivered)
		}
		d.Latency = Summarise(latencies)
		r.DeliverySeconds = lastDelivered.Sub(started).Seconds()
		if r.DeliverySeconds > 0 {
			d.PerSecond = float64(d.Delivered) / r.DeliverySeconds
		}
		r.Deliveries = d
	}
	published := make([]Sample, len(pubs.times))
	for i, t := range pubs.times {
		published[i] = Sample{At: t, Latency: pubs.latencies[i]}
	}
	r.Timeline = Seconds(started, published, delivered)
	r.Publish.SustainedPerSecond = Sustained(r.Timeline, func(s Second) int { return s.Accepted })
	if r.Deliveries != nil {
		r.Deliveries.SustainedPerSecond = Sustained(r.Timeline, func(s Second) int { return s.Delivered })
		if cfg.FailingSubscriptions+cfg.HangingSubscriptions > 0 {
			r.Notes = append(r.Notes, fmt.Sprintf("hostile mix: of %d subscriptions, %d answer 500 and %d hang; delivery figures are the %d healthy ones'",
				cfg.Subscriptions, cfg.FailingSubscriptions, cfg.HangingSubscriptions, cfg.Healthy()))
		}
		if cfg.VerifySample < 1 {
			r.Notes = append(r.Notes, fmt.Sprintf("signatures verified on a %g %% sample of requests", cfg.VerifySample*100))
		}
		if r.Deliveries.EarlyArrivals > 0 {
			r.Notes = append(r.Notes, fmt.Sprintf("%d deliveries arrived before their publish's 202 reached the publisher; counted as 0 ms", r.Deliveries.EarlyArrivals))
		}
	}
	return r
}
