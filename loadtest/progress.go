package loadtest

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"
)

// progress prints one line a second while a run goes on: totals, the
// rates of the last second, and the latency of the last second's
// deliveries.
type progress struct {
	w       io.Writer
	cfg     Config
	started time.Time
	pubs    *publishers
	rcv     *Receiver

	mu    sync.Mutex
	phase string
	done  chan struct{}
	wg    sync.WaitGroup
}

func startProgress(w io.Writer, cfg Config, started time.Time, pubs *publishers, rcv *Receiver) *progress {
	p := &progress{w: w, cfg: cfg, started: started, pubs: pubs, rcv: rcv, phase: "publishing", done: make(chan struct{})}
	if w == nil {
		return p
	}
	p.wg.Add(1)
	go p.loop()
	return p
}

func (p *progress) setPhase(phase string) {
	p.mu.Lock()
	p.phase = phase
	p.mu.Unlock()
}

func (p *progress) stop() {
	close(p.done)
	p.wg.Wait()
}

func (p *progress) loop() {
	defer p.wg.Done()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var lastAccepted, lastDelivered int64
	for {
		select {
		case <-p.done:
			return
		case <-tick.C:
		}
		accepted, delivered := p.pubs.accepted.Load(), p.rcv.delivered.Load()
		p.mu.Lock()
		phase := p.phase
		p.mu.Unlock()
		var b strings.Builder
		fmt.Fprintf(&b, "[%4.0fs %s] accepted %s (%s/s)", time.Since(p.started).Seconds(), phase,
			thousands(accepted), thousands(accepted-lastAccepted))
		if failed := p.pubs.failed.Load(); failed > 0 {
			fmt.Fprintf(&b, ", %s failed", thousands(failed))
		}
		if p.cfg.Subscriptions > 0 {
			expected := accepted * int64(p.cfg.Healthy())
			fmt.Fprintf(&b, " · delivered %s (%s/s), backlog %s", thousands(delivered),
				thousands(delivered-lastDelivered), thousands(expected-delivered))
			if w := p.rcv.takeWindow(); len(w) > 0 {
				slices.Sort(w)
				fmt.Fprintf(&b, " · e2e p50 %s p99 %s ms", msText(ms(Percentile(w, 50))), msText(ms(Percentile(w, 99))))
			}
			if f := p.rcv.failed.Load(); f > 0 {
				fmt.Fprintf(&b, " · %s answered 500", thousands(f))
			}
		}
		b.WriteByte('\n')
		_, _ = io.WriteString(p.w, b.String())
		lastAccepted, lastDelivered = accepted, delivered
	}
}
