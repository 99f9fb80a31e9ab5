package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Saturation thresholds: the share of the machine's processor time that
// was busy over one sample period. A machine turns saturated at
// SaturatedAbove and stops being so only below ClearBelow, so that what a
// saturated machine's processes save by batching (a few per cent of the
// machine) does not switch them straight back.
const (
	SaturatedAbove = 0.95
	ClearBelow     = 0.85
	// SamplePeriod is how often CPU reads the machine's counters.
	SamplePeriod = time.Second
)

// CPU tells whether the machine's processors are saturated: busy for at
// least SaturatedAbove of the last sample period, and not yet below
// ClearBelow since. Start it with Run; Saturated is safe for concurrent use
// and never blocks.
type CPU struct {
	// Path is the kernel's statistics file; DefaultStatPath when empty.
	Path string
	// Period is the time between samples; SamplePeriod when zero.
	Period time.Duration

	saturated atomic.Bool
}

// DefaultStatPath is where Linux reports the processors' time.
const DefaultStatPath = "/proc/stat"

// Saturated reports whether the machine was saturated at the last sample.
func (c *CPU) Saturated() bool { return c.saturated.Load() }

// Run samples the machine every period until ctx ends. It returns at once,
// with the error, when the statistics cannot be read (not Linux, say):
// the machine then never counts as saturated.
func (c *CPU) Run(ctx context.Context) error {
	path, period := c.Path, c.Period
	if path == "" {
		path = DefaultStatPath
	}
	if period <= 0 {
		period = SamplePeriod
	}
	prev, err := readCPUTimes(path)
	if err != nil {
		return err
	}
	ticker := time.NewTicker(period)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			c.saturated.Store(false)
			return nil
		case <-ticker.C:
		}
		now, err := readCPUTimes(path)
		if err != nil {
			c.saturated.Store(false)
			return err
		}
		c.saturated.Store(nextSaturated(c.saturated.Load(), prev, now))
		prev = now
	}
}

// cpuTimes are the machine's processor time counters, in the kernel's
// ticks: all of it, and the part no task wanted (idle and waiting for I/O).
type cpuTimes struct {
	total, idle uint64
}

// nextSaturated applies the thresholds to the period between prev and now,
// given whether the machine counted as saturated before it.
func nextSaturated(was bool, prev, now cpuTimes) bool {
	if now.total <= prev.total || now.idle < prev.idle {
		return was // counters did not move, or went back: nothing to judge
	}
	elapsed := now.total - prev.total
	busy := 1 - float64(min(now.idle-prev.idle, elapsed))/float64(elapsed)
	if was {
		return busy >= ClearBelow
	}
	return busy >= SaturatedAbove
}

func readCPUTimes(path string) (cpuTimes, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return cpuTimes{}, fmt.Errorf("read processor times: %w", err)
	}
	line, _, _ := strings.Cut(string(data), "\n")
	return parseCPULine(line)
}

// errCPULine is returned for a first line of /proc/stat that is not the
// machine's total "cpu" line.
var errCPULine = errors.New(`want "cpu" followed by at least four tick counters`)

// parseCPULine reads the aggregate line of /proc/stat: "cpu" and the
// ticks spent in user, nice, system, idle, iowait, irq, softirq, steal,
// guest and guest_nice (older kernels give fewer; at least the first four
// are always there). Guest time is already counted in user and nice, so
// it is left out of the total. Time stolen by a hypervisor counts as
// busy: the processor was not there to be had.
func parseCPULine(line string) (cpuTimes, error) {
	fields := strings.Fields(line)
	if len(fields) < 5 || fields[0] != "cpu" {
		return cpuTimes{}, fmt.Errorf("parse %q: %w", line, errCPULine)
	}
	var t cpuTimes
	counters := fields[1:min(len(fields), 9)] // not guest, guest_nice: part of user and nice already
	for i, f := range counters {
		n, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return cpuTimes{}, fmt.Errorf("parse %q: field %d: %w", line, i+1, err)
		}
		t.total += n
		if i == 3 || i == 4 { // idle, iowait
			t.idle += n
		}
	}
	return t, nil
}
