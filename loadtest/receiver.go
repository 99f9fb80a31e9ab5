package loadtest

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// acceptedLog remembers when each event's publish was answered 202, for
// the receiver to measure accepted→received latency. It is sharded so
// publishers and the receiver rarely wait for one another.
type acceptedLog struct {
	shards [64]struct {
		mu sync.Mutex
		at map[string]time.Time
	}
	seed  maphash.Seed
	count atomic.Int64
}

func newAcceptedLog() *acceptedLog {
	l := &acceptedLog{seed: maphash.MakeSeed()}
	l.clear()
	return l
}

func (l *acceptedLog) shard(id string) int {
	return int(maphash.String(l.seed, id) % uint64(len(l.shards)))
}

// add records that event id was accepted at at.
func (l *acceptedLog) add(id string, at time.Time) {
	s := &l.shards[l.shard(id)]
	s.mu.Lock()
	s.at[id] = at
	s.mu.Unlock()
	l.count.Add(1)
}

// clear forgets every event (and makes the shards' maps).
func (l *acceptedLog) clear() {
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		s.at = map[string]time.Time{}
		s.mu.Unlock()
	}
}

// get returns when event id was accepted.
func (l *acceptedLog) get(id string) (time.Time, bool) {
	s := &l.shards[l.shard(id)]
	s.mu.Lock()
	at, ok := s.at[id]
	s.mu.Unlock()
	return at, ok
}

// bootstrapDefaultTimeout is Dispatch's default subscription timeout, which
// a hanging endpoint outlasts when the run sets none.
const bootstrapDefaultTimeout = 10 * time.Second

// hangMargin is how much longer than its subscription's timeout a hanging
// endpoint holds a request.
const hangMargin = 5 * time.Second

// arrival is one request the receiver answered.
type arrival struct {
	eventID string
	sub     int
	at      time.Time
	// ok is set when the receiver answered 2xx.
	ok bool
}

type pair struct {
	eventID string
	sub     int
}

// behaviour is how an endpoint answers.
type behaviour int

const (
	_ behaviour = iota // healthy: answers 2xx at once
	// failing answers every request 500.
	failing
	// hanging answers no request: it holds each until the subscription's
	// timeout has passed (and some), so Dispatch gives up on it first.
	hanging
)

// endpoint is one subscription's path on the receiver.
type endpoint struct {
	behaviour behaviour
	mu        sync.RWMutex
	key       *signatureKey
}

// Receiver is the webhook endpoint of every subscription of a run: a
// keep-alive HTTP server on 127.0.0.1 with one path per subscription
// (/s/<index>). It verifies signatures as the Standard Webhooks library
// does (signatureKey), answers after the configured latency, fails the
// configured share of requests with 500, and records every request.
type Receiver struct {
	latency      time.Duration
	hang         time.Duration
	failureRate  float64
	verifySample float64
	accepted     *acceptedLog
	endpoints    []*endpoint

	srv *fasthttp.Server
	ln  net.Listener

	mu       sync.Mutex
	arrivals []arrival
	firsts   map[pair]struct{}
	window   []time.Duration // latencies since the last progress line
	// sampled holds the latencies since the last soak sample, when the
	// run samples (Config.SampleEvery); nil and left alone otherwise.
	sampled  []time.Duration
	sampling bool

	requests     atomic.Int64
	failed       atomic.Int64
	hung         atomic.Int64 // requests a hanging endpoint held
	delivered    atomic.Int64 // distinct (event, subscription) pairs answered 2xx
	duplicates   atomic.Int64
	unknown      atomic.Int64 // requests to a path or subscription that is not ours
	verified     atomic.Int64
	badSignature atomic.Int64
	lastOK       atomic.Int64 // unix nanoseconds of the latest first arrival
	firstBadSig  atomic.Pointer[string]
}

// NewReceiver listens on 127.0.0.1 (port chosen by the system) with one
// endpoint per subscription, the last cfg.HangingSubscriptions of them
// hanging and the cfg.FailingSubscriptions before those failing; secrets
// are set with SetSecret once the subscriptions exist.
func NewReceiver(subscriptions int, cfg Config, accepted *acceptedLog) (*Receiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("receiver: listen on 127.0.0.1: %w", err)
	}
	r := &Receiver{
		latency: cfg.ReceiverLatency, failureRate: cfg.ReceiverFailureRate, verifySample: cfg.VerifySample,
		accepted: accepted, firsts: map[pair]struct{}{}, ln: ln, sampling: cfg.SampleEvery > 0,
		hang: cmp.Or(cfg.SubscriptionTimeout, bootstrapDefaultTimeout) + hangMargin,
	}
	healthyEnd := subscriptions - cfg.FailingSubscriptions - cfg.HangingSubscriptions
	for i := range subscriptions {
		e := &endpoint{}
		switch {
		case i >= healthyEnd+cfg.FailingSubscriptions:
			e.behaviour = hanging
		case i >= healthyEnd:
			e.behaviour = failing
		}
		r.endpoints = append(r.endpoints, e)
	}
	// fasthttp's server: whatever the receiver spends is taken from the
	// machine it measures, and net/http's server starts a goroutine per
	// request that reads ahead while the handler runs, and makes syscalls
	// to stop it. In W4 this took 13 µs of the tool's CPU off each delivery.
	r.srv = &fasthttp.Server{
		Handler:               r.serve,
		ReadTimeout:           time.Minute,
		IdleTimeout:           2 * time.Minute,
		NoDefaultServerHeader: true,
		NoDefaultDate:         true,
		NoDefaultContentType:  true,
	}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

// URL is subscription i's endpoint.
func (r *Receiver) URL(i int) string { return fmt.Sprintf("http://%s/s/%d", r.ln.Addr(), i) }

// SetSecret makes subscription i's endpoint verify with secret.
func (r *Receiver) SetSecret(i int, secret string) error {
	key, err := newSignatureKey(secret)
	if err != nil {
		return fmt.Errorf("receiver: secret of subscription %d: %w", i, err)
	}
	e := r.endpoints[i]
	e.mu.Lock()
	e.key = key
	e.mu.Unlock()
	return nil
}

// Close stops the server: it stops accepting, ends idle keep-alive
// connections, and waits for requests in flight (their latency is cut
// short) until ctx ends. Then it lets go of what the run recorded: the
// server outlives Close by up to ten seconds (fasthttp's idle-worker
// sweep sleeps that long before it sees the server stopped), and with it
// the receiver, whose records would be the next run's memory in a bench.
func (r *Receiver) Close(ctx context.Context) error {
	err := r.srv.ShutdownWithContext(ctx)
	// A Serve that had not started when Shutdown ran would accept on: its
	// listener closed, it returns.
	_ = r.ln.Close()
	r.mu.Lock()
	r.arrivals, r.firsts, r.window, r.sampled = nil, nil, nil, nil
	r.mu.Unlock()
	r.accepted.clear()
	return err
}

// serve handles one webhook.
func (r *Receiver) serve(ctx *fasthttp.RequestCtx) {
	r.requests.Add(1)
	sub, ok := r.subscription(ctx.Path())
	if !ok || !ctx.IsPost() {
		r.unknown.Add(1)
		ctx.SetStatusCode(fasthttp.StatusNotFound) // not ctx.NotFound: its reset would add a Date header, and the goroutine that keeps it
		return
	}
	if r.verifySample >= 1 || (r.verifySample > 0 && rand.Float64() < r.verifySample) {
		r.verify(sub, &ctx.Request.Header, ctx.PostBody())
	}
	switch r.endpoints[sub].behaviour {
	case hanging:
		r.hung.Add(1)
		r.wait(ctx, r.hang)
		ctx.SetStatusCode(fasthttp.StatusServiceUnavailable) // whoever still listens
		return
	case failing:
		r.record(arrival{eventID: string(ctx.Request.Header.Peek("Webhook-Id")), sub: sub, at: time.Now()})
		r.failed.Add(1)
		ctx.SetStatusCode(fasthttp.StatusInternalServerError)
		return
	}
	r.wait(ctx, r.latency)
	fail := r.failureRate > 0 && rand.Float64() < r.failureRate
	now := time.Now()
	r.record(arrival{eventID: string(ctx.Request.Header.Peek("Webhook-Id")), sub: sub, at: now, ok: !fail})
	if fail {
		r.failed.Add(1)
		ctx.SetStatusCode(fasthttp.StatusInternalServerError)
		return
	}
	ctx.SetStatusCode(fasthttp.StatusOK)
}

// wait holds a request for d, or until the server shuts down.
func (r *Receiver) wait(ctx *fasthttp.RequestCtx, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	select {
	case <-t.C:
	case <-ctx.Done(): // the server is shutting down
		t.Stop()
	}
}

func (r *Receiver) subscription(path []byte) (int, bool) {
	rest, ok := bytes.CutPrefix(path, []byte("/s/"))
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(string(rest))
	if err != nil || i < 0 || i >= len(r.endpoints) {
		return 0, false
	}
	return i, true
}

func (r *Receiver) verify(sub int, header *fasthttp.RequestHeader, body []byte) {
	e := r.endpoints[sub]
	e.mu.RLock()
	key := e.key
	e.mu.RUnlock()
	err := errors.New("no secret known for this subscription yet")
	if key != nil {
		err = key.verify(header.Peek("Webhook-Id"), header.Peek("Webhook-Timestamp"), header.Peek("Webhook-Signature"), body, time.Now())
	}
	r.verified.Add(1)
	if err != nil {
		r.badSignature.Add(1)
		msg := fmt.Sprintf("subscription %d, webhook-id %s: %v", sub, header.Peek("Webhook-Id"), err)
		r.firstBadSig.CompareAndSwap(nil, &msg)
	}
}

func (r *Receiver) record(a arrival) {
	var latency time.Duration
	var known bool
	if a.ok {
		var at time.Time
		if at, known = r.accepted.get(a.eventID); known {
			latency = a.at.Sub(at)
		}
	}
	r.mu.Lock()
	if r.firsts == nil { // closed: a request Close stopped waiting for
		r.mu.Unlock()
		return
	}
	r.arrivals = append(r.arrivals, a)
	first := false
	if a.ok {
		p := pair{a.eventID, a.sub}
		if _, seen := r.firsts[p]; !seen {
			r.firsts[p] = struct{}{}
			first = true
			if known {
				r.window = append(r.window, latency)
				if r.sampling {
					r.sampled = append(r.sampled, latency)
				}
			}
		}
	}
	r.mu.Unlock()
	switch {
	case first:
		r.delivered.Add(1)
		r.lastOK.Store(a.at.UnixNano())
	case a.ok:
		r.duplicates.Add(1)
	}
}

// takeWindow returns the latencies of first arrivals since the last call
// whose publish had already been answered when they arrived.
func (r *Receiver) takeWindow() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.window
	r.window = nil
	return w
}

// takeSampled returns the latencies of first arrivals since the last call,
// as takeWindow does, for the soak samples; nil unless the run samples.
func (r *Receiver) takeSampled() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.sampled
	r.sampled = nil
	return s
}

// snapshot returns every request recorded so far.
func (r *Receiver) snapshot() []arrival {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]arrival(nil), r.arrivals...)
}
