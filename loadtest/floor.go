package loadtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dispatch-webhooks/dispatch/adapters/webhook"
	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// The floor is what the two HTTP exchanges of every event cost on this
// machine with nothing else: a relay process that takes a publish (JSON
// decoded, 202 answered) and sends its signed webhook with a worker's
// sender, with no storage and no queue. Dispatch's CPU per event at a
// rate cannot go below the relay's at that rate; what it spends above is
// PostgreSQL, Redis and the hand-off between its processes. With
// --durable the relay also commits each event before its 202 and each
// attempt after its answer (see floordurable.go).

const floorUsage = `Usage: dispatch-load floor [flags]

Measures the floor under Dispatch's CPU per event: a relay process that
receives each publish and sends its signed webhook, with no storage and no
queue, at each rate for --duration; prints the relay's CPU per event.
With --durable the relay commits each event to PostgreSQL before its 202
and each attempt once the endpoint answered, in group commits with
Dispatch's lingers, on a database of its own (dropped at the end); the
CPU per event then counts PostgreSQL too.

Flags:
`

func floorMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("dispatch-load floor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, floorUsage)
		fs.PrintDefaults()
	}
	rates := fs.String("rates", "100,1000,5000", "comma-separated rates in events/s")
	duration := fs.Duration("duration", 20*time.Second, "how long each rate is measured, after 2s of warm-up")
	durable := fs.Bool("durable", false, "commit each event and each attempt to PostgreSQL, as the least a sender that loses nothing does")
	databaseURL := fs.String("database-url", baseConfig().DatabaseURL, "PostgreSQL server on which --durable creates and drops a database of its own ($DATABASE_URL)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	list, err := parseRates(*rates)
	if err != nil {
		fmt.Fprintf(stderr, "dispatch-load floor: %v\n", err)
		return 2
	}
	if *duration < time.Second || *duration > 10*time.Minute {
		fmt.Fprintf(stderr, "--duration must be 1s..10m, got %s\n", *duration)
		return 2
	}
	if _, err := checkPostgresURL(*databaseURL); *durable && err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(stderr, "floor:", err)
		return 1
	}
	if !*durable {
		fmt.Fprintln(stdout, "| events/s | relay CPU per event | relay cores busy |")
		fmt.Fprintln(stdout, "|---:|---:|---:|")
	} else {
		fmt.Fprintln(stdout, "| events/s | CPU per event: relay and PostgreSQL | relay | PostgreSQL |")
		fmt.Fprintln(stdout, "|---:|---:|---:|---:|")
	}
	for _, rate := range list {
		var db *floorDatabase
		if *durable {
			if db, err = newFloorDatabase(ctx, *databaseURL); err != nil {
				fmt.Fprintln(stderr, "floor:", err)
				return 1
			}
		}
		m, err := measureFloor(ctx, self, rate, *duration, db)
		if db != nil {
			db.drop()
		}
		if err != nil {
			fmt.Fprintln(stderr, "floor:", err)
			return 1
		}
		if !*durable {
			fmt.Fprintf(stdout, "| %s | %.3f ms | %.2f |\n", thousands(int64(rate)), m.relayMs, m.relayCores)
		} else {
			fmt.Fprintf(stdout, "| %s | %.3f ms | %.3f ms | %.3f ms |\n", thousands(int64(rate)), m.relayMs+m.postgresMs, m.relayMs, m.postgresMs)
		}
	}
	return 0
}

// floorMeasure is what one rate of the floor cost: CPU per event in ms of
// the relay and of PostgreSQL (durable only), and the relay's cores busy.
type floorMeasure struct {
	relayMs, postgresMs, relayCores float64
}

// measureFloor runs a relay process (self floor-relay) at rate for
// duration, durable on db when it is set, and returns what it cost.
func measureFloor(ctx context.Context, self string, rate float64, duration time.Duration, db *floorDatabase) (floorMeasure, error) {
	var received atomic.Int64
	receiver := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		received.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}), ReadHeaderTimeout: 10 * time.Second}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return floorMeasure{}, err
	}
	go func() { _ = receiver.Serve(ln) }()
	defer func() { _ = receiver.Close() }()

	args := []string{floorRelayArg, "http://" + ln.Addr().String() + "/hook"}
	if db != nil {
		args = append(args, db.dsn)
	}
	cmd := exec.CommandContext(ctx, self, args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return floorMeasure{}, err
	}
	if err := cmd.Start(); err != nil {
		return floorMeasure{}, fmt.Errorf("start the relay: %w", err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		return floorMeasure{}, fmt.Errorf("the relay did not say its address: %w", err)
	}
	publishURL := "http://" + strings.TrimSpace(addr) + "/v1/events"

	body := []byte(`{"type":"order.created","source":"dispatch-load","data":{"pad":"` + strings.Repeat("x", 1000) + `"}}`)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	ticks := make(chan struct{}, 4096)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range ticks {
				resp, err := client.Post(publishURL, "application/json", bytes.NewReader(body))
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
				}
			}
		})
	}
	const warmUp = 2 * time.Second
	interval := time.Duration(float64(time.Second) / rate)
	start := time.Now()
	next := start
	var received0 int64
	var first cpuSample
	measuring := false
	for time.Since(start) < warmUp+duration && ctx.Err() == nil {
		if !measuring && time.Since(start) >= warmUp {
			groups := cpuGroups{roles: []int{cmd.Process.Pid}}
			if db != nil {
				if groups.postgres, err = db.pids(ctx); err != nil {
					break
				}
			}
			first, received0, measuring = takeCPUSample(groups), received.Load(), true
		}
		next = next.Add(interval)
		time.Sleep(time.Until(next))
		ticks <- struct{}{}
	}
	var last cpuSample
	if err == nil && measuring {
		groups := first.groups
		if db != nil {
			// Backends the relay's pool opened meanwhile count from zero.
			var pids []int
			if pids, err = db.pids(ctx); err == nil {
				groups = groups.union(cpuGroups{postgres: pids})
			}
		}
		last = takeCPUSample(groups)
	}
	events := received.Load() - received0
	close(ticks)
	wg.Wait()
	if err != nil {
		return floorMeasure{}, err
	}
	if ctx.Err() != nil {
		return floorMeasure{}, ctx.Err()
	}
	if events <= 0 {
		return floorMeasure{}, fmt.Errorf("no webhook reached the receiver at %g events/s", rate)
	}
	if _, ok := last.perPID[cmd.Process.Pid]; !ok {
		return floorMeasure{}, fmt.Errorf("the relay's CPU time could not be read at %g events/s", rate)
	}
	ms := func(pids []int) float64 {
		var ticks int64
		for _, pid := range pids {
			ticks += last.perPID[pid] - first.perPID[pid]
		}
		return float64(ticks) * 1000 / clockTicks
	}
	relay := ms(last.groups.roles)
	return floorMeasure{
		relayMs:    relay / float64(events),
		postgresMs: ms(last.groups.postgres) / float64(events),
		relayCores: relay / 1000 / duration.Seconds(),
	}, nil
}

// floorRelayArg is the hidden subcommand the floor starts itself with.
const floorRelayArg = "floor-relay"

// floorRelayMain serves a relay on a free loopback port, prints its
// address, and serves until killed.
func floorRelayMain(args []string, stdout, stderr io.Writer) int {
	if len(args) != 1 && len(args) != 2 {
		fmt.Fprintln(stderr, "usage: dispatch-load floor-relay <webhook URL> [<database URL>]")
		return 2
	}
	var store *floorStore
	if len(args) == 2 {
		var err error
		if store, err = openFloorStore(context.Background(), args[1]); err != nil {
			fmt.Fprintln(stderr, "floor-relay:", err)
			return 1
		}
		defer store.close()
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(stderr, "floor-relay:", err)
		return 1
	}
	fmt.Fprintln(stdout, ln.Addr().String())
	srv := &http.Server{Handler: newFloorRelay(args[0], store), ReadHeaderTimeout: 10 * time.Second}
	if err := srv.Serve(ln); err != nil {
		fmt.Fprintln(stderr, "floor-relay:", err)
		return 1
	}
	return 0
}

// floorRelaySecret signs the relay's webhooks.
var floorRelaySecret = domain.MustGenerateSecret()

// floorRelay is the relay's handler: each publish is decoded and answered
// 202, then its signed webhook is sent to target by the worker's own
// sender (adapters/webhook), as a delivery is. With a store, the event is
// committed before the 202 and the attempt once the endpoint answered.
type floorRelay struct {
	target string
	store  *floorStore
	sender *webhook.Sender
	n      atomic.Int64
	// sends tracks the webhooks on their way (and their records).
	sends sync.WaitGroup
}

func newFloorRelay(target string, store *floorStore) *floorRelay {
	return &floorRelay{target: target, store: store, sender: webhook.NewSender(webhook.SenderOptions{
		Policy:          webhook.Policy{Allowed: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}},
		MaxConnsPerHost: 1024,
	})}
}

func (f *floorRelay) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var ev struct {
		Type   string          `json:"type"`
		Source string          `json:"source"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(r.Body).Decode(&ev); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	id := "evt_" + strconv.FormatInt(f.n.Add(1), 10)
	if f.store != nil {
		err := f.store.events.Commit(r.Context(), floorEvent{id: id, typ: ev.Type, source: ev.Source, data: ev.Data, at: time.Now()})
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	_, _ = fmt.Fprintf(w, `{"id":%q}`, id)
	f.sends.Go(func() {
		now := time.Now()
		payload, _ := json.Marshal(map[string]any{"id": id, "type": ev.Type, "source": ev.Source, "timestamp": now, "data": ev.Data})
		header := http.Header{}
		header.Set("Content-Type", "application/json")
		header.Set("webhook-id", id)
		header.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
		header.Set("webhook-signature", domain.Sign([]domain.Secret{floorRelaySecret}, id, now, payload))
		res, err := f.sender.Send(context.Background(), ports.WebhookRequest{URL: f.target, Header: header, Body: payload, Timeout: 10 * time.Second})
		if f.store != nil {
			if err != nil {
				res.StatusCode = 0
			}
			_ = f.store.attempts.Commit(context.Background(), floorAttempt{eventID: id, statusCode: res.StatusCode, took: res.Duration, at: time.Now()})
		}
	})
}

// wait waits until the webhooks of the publishes answered so far were
// sent, and with a store, their attempts committed.
func (f *floorRelay) wait() { f.sends.Wait() }
