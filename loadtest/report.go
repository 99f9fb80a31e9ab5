package loadtest

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Report is what one run measured.
type Report struct {
	// Workload names the standard workload, if the run was one.
	Workload string `json:"workload,omitempty"`
	// Config is every setting of the run.
	Config  Config    `json:"config"`
	Machine Machine   `json:"machine"`
	Started time.Time `json:"started"`
	// PublishSeconds is from the first publish sent to the last answered;
	// DeliverySeconds from the first publish sent to the last first
	// arrival at the receiver.
	PublishSeconds  float64 `json:"publish_seconds"`
	DeliverySeconds float64 `json:"delivery_seconds,omitempty"`

	Publish    PublishStats    `json:"publish"`
	Deliveries *DeliveryStats  `json:"deliveries,omitempty"`
	Memory     []ProcessMemory `json:"memory,omitempty"`
	CPU        *CPUUse         `json:"cpu,omitempty"`
	Timeline   []Second        `json:"timeline"`
	// Samples are the run's soak samples (Config.SampleEvery), in order.
	Samples []SoakSample `json:"samples,omitempty"`
	Notes   []string     `json:"notes,omitempty"`
}

// Machine says where the run happened.
type Machine struct {
	CPUs int `json:"cpus"`

	GOOS      string `json:"goos"`
	GOARCH    string `json:"goarch"`
	GoVersion string `json:"go_version"`
	CPUModel  string `json:"cpu_model,omitempty"`
}

func thisMachine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, GoVersion: runtime.Version()}
	if raw, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(raw), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	return m
}

// PublishStats are the producer's view.
type PublishStats struct {
	// Sent is how many publishes were sent; Accepted how many were
	// answered 202 (committed); Failed the rest, by kind in Errors.
	Sent     int64            `json:"sent"`
	Accepted int64            `json:"accepted"`
	Failed   int64            `json:"failed"`
	Errors   map[string]int64 `json:"errors,omitempty"`
	// PerSecond is Accepted over PublishSeconds; SustainedPerSecond the
	// median of the full seconds.
	PerSecond          float64 `json:"per_second"`
	SustainedPerSecond float64 `json:"sustained_per_second"`
	// Latency is from sending a publish to its 202.
	Latency Latency `json:"latency"`
}

// DeliveryStats are the receiver's view.
type DeliveryStats struct {
	// Expected is accepted events × subscriptions; Delivered how many of
	// those (event, subscription) pairs the receiver answered 2xx at least
	// once; Lost = Expected − Delivered, those never received before the
	// drain ended; Duplicates the 2xx answers beyond a pair's first.
	Expected   int64 `json:"expected"`
	Delivered  int64 `json:"delivered"`
	Lost       int64 `json:"lost"`
	Duplicates int64 `json:"duplicates"`
	// Requests is every webhook request the receiver answered, failures
	// included; FailedByReceiver those it answered 500 on purpose.
	Requests         int64 `json:"requests"`
	FailedByReceiver int64 `json:"failed_by_receiver"`
	// Hung is how many requests the hanging endpoints held (hostile mix).
	Hung int64 `json:"hung,omitempty"`
	// AttemptsPerDelivery is Requests / Delivered.
	AttemptsPerDelivery float64 `json:"attempts_per_delivery"`
	// Unexpected counts 2xx arrivals for events the tool never saw
	// accepted (a publish that failed on the client side after the commit)
	// or at paths that are not a subscription's.
	Unexpected int64 `json:"unexpected"`
	// Verified is how many signatures were checked; BadSignatures how many
	// of them were refused (as the Standard Webhooks library refuses).
	Verified      int64  `json:"verified"`
	BadSignatures int64  `json:"bad_signatures"`
	FirstBadSig   string `json:"first_bad_signature,omitempty"`
	// PerSecond is Delivered over DeliverySeconds; SustainedPerSecond the
	// median of the full seconds with deliveries.
	PerSecond          float64 `json:"per_second"`
	SustainedPerSecond float64 `json:"sustained_per_second"`
	// Latency is from the publish's 202 reaching the tool to the first
	// arrival of each pair. An arrival that came before the 202 reached
	// the publisher counts as 0 (see EarlyArrivals).
	Latency       Latency `json:"latency"`
	EarlyArrivals int64   `json:"early_arrivals"`
	// DrainEnded says why the wait for deliveries stopped: "all delivered",
	// "stalled", "timeout" or "interrupted".
	DrainEnded string `json:"drain_ended"`
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteMarkdown writes the report as a Markdown table.
func (r *Report) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	title := "dispatch-load run"
	if r.Workload != "" {
		title += " — " + r.Workload
	}
	fmt.Fprintf(&b, "### %s\n\n", title)
	c := r.Config
	fmt.Fprintf(&b, "%s; %s publishers, rate %s, %d subscription(s), payload %d B, %s, receiver %s/%s failures; %d CPU(s) %s, started %s.\n\n",
		eventsText(c), thousands(int64(c.Publishers)), rateText(c.Rate), c.Subscriptions, c.PayloadBytes, workersText(c),
		c.ReceiverLatency, pct(c.ReceiverFailureRate), r.Machine.CPUs, r.Machine.CPUModel, r.Started.Format(time.RFC3339))
	b.WriteString("| metric | value |\n|---|---:|\n")
	row := func(k, v string) { fmt.Fprintf(&b, "| %s | %s |\n", k, v) }
	p := r.Publish
	row("events accepted", fmt.Sprintf("%s of %s sent (%s failed)", thousands(p.Accepted), thousands(p.Sent), thousands(p.Failed)))
	row("events accepted/s", fmt.Sprintf("%s (sustained %s)", rate(p.PerSecond), rate(p.SustainedPerSecond)))
	row("publish latency p50 / p90 / p99 / max", latencyText(p.Latency))
	if d := r.Deliveries; d != nil {
		row("deliveries received/s", fmt.Sprintf("%s (sustained %s)", rate(d.PerSecond), rate(d.SustainedPerSecond)))
		row("accepted→received p50 / p90 / p99 / max", latencyText(d.Latency))
		row("deliveries", fmt.Sprintf("%s of %s expected", thousands(d.Delivered), thousands(d.Expected)))
		lost := fmt.Sprintf("%s / %s", thousands(d.Lost), thousands(d.Duplicates))
		if d.Lost > 0 && d.DrainEnded != "all delivered" {
			lost += fmt.Sprintf(" (lost = not received when the drain ended: %s)", d.DrainEnded)
		}
		row("lost / duplicates", lost)
		row("attempts per delivery", fmt.Sprintf("%.3f (%s requests, %s answered 500 on purpose)", d.AttemptsPerDelivery, thousands(d.Requests), thousands(d.FailedByReceiver)))
		row("signatures verified / refused", fmt.Sprintf("%s / %s", thousands(d.Verified), thousands(d.BadSignatures)))
		if d.Unexpected > 0 {
			row("unexpected arrivals", thousands(d.Unexpected))
		}
		row("drain ended", d.DrainEnded)
	}
	for _, m := range r.Memory {
		v := "unknown"
		if m.PeakRSSBytes > 0 {
			v = fmt.Sprintf("%.1f MiB", float64(m.PeakRSSBytes)/(1<<20))
		}
		if m.Note != "" {
			v += " (" + m.Note + ")"
		}
		row("peak RSS: "+m.Name, v)
	}
	if u := r.CPU; u != nil {
		roles := ""
		if u.Roles > 0 {
			roles = fmt.Sprintf(", api + scheduler %.2f", u.Roles)
		}
		row("CPU cores busy (of "+strconv.Itoa(r.Machine.CPUs)+")", fmt.Sprintf("%.2f: dispatch-load %.2f, workers %.2f%s, PostgreSQL %.2f, Redis %.2f, other %.2f",
			u.Machine, u.Tool, u.Workers, roles, u.PostgreSQL, u.Redis, u.Other))
		if u.PerEventMs > 0 {
			what := "Dispatch, PostgreSQL and Redis"
			if u.WithTool {
				what += ", with the load generator and the receiver (api and scheduler run inside the tool; --processes leaves them out)"
			}
			row("machine CPU per event", fmt.Sprintf("%.3f ms: %s", u.PerEventMs, what))
		}
	}
	if len(p.Errors) > 0 {
		kinds := make([]string, 0, len(p.Errors))
		for k := range p.Errors {
			kinds = append(kinds, k)
		}
		sort.Strings(kinds)
		parts := make([]string, len(kinds))
		for i, k := range kinds {
			parts[i] = fmt.Sprintf("%s × %s", thousands(p.Errors[k]), k)
		}
		row("publish errors", strings.Join(parts, "; "))
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "\n- %s", n)
	}
	if len(r.Samples) > 0 {
		if len(r.Notes) > 0 {
			b.WriteString("\n")
		}
		writeSamplesMarkdown(&b, r.Samples)
	}
	if !strings.HasSuffix(b.String(), "|\n") {
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func eventsText(c Config) string {
	switch {
	case c.Events > 0 && c.Duration > 0:
		return fmt.Sprintf("%s events or %s", thousands(int64(c.Events)), c.Duration)
	case c.Events > 0:
		return thousands(int64(c.Events)) + " events"
	}
	return "publishing for " + c.Duration.String()
}

func rateText(r float64) string {
	if r == 0 {
		return "open loop"
	}
	return rate(r) + "/s"
}

func workersText(c Config) string {
	var w string
	switch {
	case c.Target != "":
		return "against " + c.Target
	case c.Workers == 0:
		w = "one in-process worker"
	case c.Workers == 1:
		w = "1 worker process"
	default:
		w = fmt.Sprintf("%d worker processes", c.Workers)
	}
	if c.Queue != "" {
		w += ", queue " + c.Queue
	}
	return w
}

func latencyText(l Latency) string {
	if l.Count == 0 {
		return "–"
	}
	return fmt.Sprintf("%s / %s / %s / %s ms", msText(l.P50Ms), msText(l.P90Ms), msText(l.P99Ms), msText(l.MaxMs))
}

func msText(v float64) string {
	switch {
	case v < 10:
		return fmt.Sprintf("%.2f", v)
	case v < 100:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.0f", v)
}

func pct(f float64) string { return fmt.Sprintf("%g %%", f*100) }

func rate(v float64) string { return thousands(int64(v + 0.5)) }

// thousands formats n with thin separators: 12,345.
func thousands(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, ch := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(ch)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
