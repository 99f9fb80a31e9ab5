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
// PostgreSQL, Redis and the hand-off between its processes.

const floorUsage = `Usage: dispatch-load floor [flags]

Measures the floor under Dispatch's CPU per event: a relay process that
receives each publish and sends its signed webhook, with no storage and no
queue, at each rate for --duration; prints the relay's CPU per event.

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
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(stderr, "floor:", err)
		return 1
	}
	fmt.Fprintln(stdout, "| events/s | relay CPU per event | relay cores busy |")
	fmt.Fprintln(stdout, "|---:|---:|---:|")
	for _, rate := range list {
		perEvent, cores, err := measureFloor(ctx, self, rate, *duration)
		if err != nil {
			fmt.Fprintln(stderr, "floor:", err)
			return 1
		}
		fmt.Fprintf(stdout, "| %s | %.3f ms | %.2f |\n", thousands(int64(rate)), perEvent, cores)
	}
	return 0
}

// measureFloor runs a relay process (self floor-relay) at rate for
// duration and returns its CPU per event in ms and its cores busy.
func measureFloor(ctx context.Context, self string, rate float64, duration time.Duration) (perEvent, cores float64, err error) {
	var received atomic.Int64
	receiver := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		received.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}), ReadHeaderTimeout: 10 * time.Second}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, 0, err
	}
	go func() { _ = receiver.Serve(ln) }()
	defer func() { _ = receiver.Close() }()

	cmd := exec.CommandContext(ctx, self, floorRelayArg, "http://"+ln.Addr().String()+"/hook")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, 0, err
	}
	if err := cmd.Start(); err != nil {
		return 0, 0, fmt.Errorf("start the relay: %w", err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		return 0, 0, fmt.Errorf("the relay did not say its address: %w", err)
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
	var ticks0, received0 int64
	measuring := false
	for time.Since(start) < warmUp+duration && ctx.Err() == nil {
		if !measuring && time.Since(start) >= warmUp {
			if ticks0, err = processTicks(cmd.Process.Pid); err != nil {
				break
			}
			received0, measuring = received.Load(), true
		}
		next = next.Add(interval)
		time.Sleep(time.Until(next))
		ticks <- struct{}{}
	}
	var ticks1 int64
	if err == nil {
		ticks1, err = processTicks(cmd.Process.Pid)
	}
	events := received.Load() - received0
	close(ticks)
	wg.Wait()
	if err != nil {
		return 0, 0, err
	}
	if ctx.Err() != nil {
		return 0, 0, ctx.Err()
	}
	if events <= 0 {
		return 0, 0, fmt.Errorf("no webhook reached the receiver at %g events/s", rate)
	}
	cpuMs := float64(ticks1-ticks0) * 1000 / clockTicks
	return cpuMs / float64(events), cpuMs / 1000 / duration.Seconds(), nil
}

// floorRelayArg is the hidden subcommand the floor starts itself with.
const floorRelayArg = "floor-relay"

// floorRelayMain serves a relay on a free loopback port, prints its
// address, and serves until killed.
func floorRelayMain(args []string, stdout, stderr io.Writer) int {
	if len(args) != 1 {
		fmt.Fprintln(stderr, "usage: dispatch-load floor-relay <webhook URL>")
		return 2
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(stderr, "floor-relay:", err)
		return 1
	}
	fmt.Fprintln(stdout, ln.Addr().String())
	srv := &http.Server{Handler: newFloorRelay(args[0]), ReadHeaderTimeout: 10 * time.Second}
	if err := srv.Serve(ln); err != nil {
		fmt.Fprintln(stderr, "floor-relay:", err)
		return 1
	}
	return 0
}

// floorRelaySecret signs the relay's webhooks.
var floorRelaySecret = domain.MustGenerateSecret()

// newFloorRelay is the relay's handler: each publish is decoded and
// answered 202, then its signed webhook is sent to target by the
// worker's own sender (adapters/webhook), as a delivery is.
func newFloorRelay(target string) http.Handler {
	sender := webhook.NewSender(webhook.SenderOptions{
		Policy:          webhook.Policy{Allowed: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}},
		MaxConnsPerHost: 1024,
	})
	var n atomic.Int64
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ev struct {
			Type   string          `json:"type"`
			Source string          `json:"source"`
			Data   json.RawMessage `json:"data"`
		}
		if err := json.NewDecoder(r.Body).Decode(&ev); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		id := "evt_" + strconv.FormatInt(n.Add(1), 10)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		_, _ = fmt.Fprintf(w, `{"id":%q}`, id)
		go func() {
			now := time.Now()
			payload, _ := json.Marshal(map[string]any{"id": id, "type": ev.Type, "source": ev.Source, "timestamp": now, "data": ev.Data})
			header := http.Header{}
			header.Set("Content-Type", "application/json")
			header.Set("webhook-id", id)
			header.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
			header.Set("webhook-signature", domain.Sign([]domain.Secret{floorRelaySecret}, id, now, payload))
			_, _ = sender.Send(context.Background(), ports.WebhookRequest{URL: target, Header: header, Body: payload, Timeout: 10 * time.Second})
		}()
	})
}
