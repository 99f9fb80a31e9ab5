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
// was busy. A machine turns saturated when it was busy for SaturatedAbove
// of the last half period, and stops being so only when it was busy for
// less than ClearBelow of the last whole period, so that load that begins
// is seen within a half period, and what a saturated machine's processes
// save by batching or standing by (a few per cent of the machine) does
// not switch them straight back.
const (
	SaturatedAbove = 0.95
	ClearBelow     = 0.85
	// SamplePeriod is the window over which a saturated machine is judged
	// to have time to spare; CPU reads the counters four times in it.
	SamplePeriod = time.Second
)

// CPU tells whether the machine's processors are saturated: busy for at
// least SaturatedAbove of a half period, and not yet below ClearBelow over
// a whole one since. Start it with Run; Saturated is safe for concurrent
// use and never blocks.
type CPU struct {
	// Path is the kernel's statistics file; DefaultStatPath when empty.
	Path string
	// Period is the window a saturated machine is judged over, read four
	// times in it; SamplePeriod when zero.
	Period time.Duration

	saturated atomic.Bool
}

// DefaultStatPath is where Linux reports the processors' time.
const DefaultStatPath = "/proc/stat"

// Saturated reports whether the machine was saturated at the last sample.
func (c *CPU) Saturated() bool { return c.saturated.Load() }

// samplesPerPeriod is how many times CPU reads the counters in a period.
const samplesPerPeriod = 4

// Run samples the machine samplesPerPeriod times a period until ctx
// ends. It returns at once, with the error, when the statistics cannot be
// read (not Linux, say): the machine then never counts as saturated.
func (c *CPU) Run(ctx context.Context) error {
	path, period := c.Path, c.Period
	if path == "" {
		path = DefaultStatPath
	}
	if period <= 0 {
		period = SamplePeriod
	}
	first, err := readCPUTimes(path)
	if err != nil {
		return err
	}
	// The counters as read at the last samplesPerPeriod samples and now,
	// oldest first.
	window := make([]cpuTimes, 1, samplesPerPeriod+1)
	window[0] = first
	ticker := time.NewTicker(max(period/samplesPerPeriod, time.Millisecond))
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
		if len(window) == cap(window) {
			window = append(window[:0], window[1:]...)
		}
		window = append(window, now)
		c.saturated.Store(saturatedOver(c.saturated.Load(), window))
	}
}

// saturatedOver judges the machine by window, the counters as read at up
// to samplesPerPeriod+1 samples, oldest first: whether it turned
// saturated over the last half period, or, if it was, whether it still is
// over the whole (as much of either as window holds).
func saturatedOver(was bool, window []cpuTimes) bool {
	now := window[len(window)-1]
	from := window[0]
	if !was {
		from = window[max(len(window)-1-samplesPerPeriod/2, 0)]
	}
	return nextSaturated(was, from, now)
}

// cpuTimes are the machine's processor ticks: in all, idle (I/O wait
// included), and waiting for I/O.
type cpuTimes struct {
	total, idle, iowait uint64
}

// nextSaturated applies the thresholds to the period between prev and now,
// given whether the machine counted as saturated before it. Time waiting
// for I/O is spare when the machine turns saturated, but not when it
// clears: a saturated machine whose processes stall on the disk a moment
// (PostgreSQL's commits, on a slow virtual disk) has no processor time to
// spare for more work, only a disk that more work would wait for too.
func nextSaturated(was bool, prev, now cpuTimes) bool {
	if now.total <= prev.total || now.idle < prev.idle {
		return was // counters did not move, or went back: nothing to judge
	}
	elapsed := now.total - prev.total
	spare := min(now.idle-prev.idle, elapsed)
	if was {
		if now.iowait >= prev.iowait { // the kernel's I/O wait may go back
			spare -= min(now.iowait-prev.iowait, spare)
		}
		return 1-float64(spare)/float64(elapsed) >= ClearBelow
	}
	return 1-float64(spare)/float64(elapsed) >= SaturatedAbove
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
// busy: the processor was not there to be had. I/O wait counts as idle,
// and is kept apart too (nextSaturated).
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
		if i == 4 {
			t.iowait = n
		}
	}
	return t, nil
}
