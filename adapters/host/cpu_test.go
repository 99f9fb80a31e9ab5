package host_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dispatch-webhooks/dispatch/adapters/host"
)

// fakeStat is a /proc/stat whose counters the test advances.
type fakeStat struct {
	path        string
	total, idle atomic.Uint64
}

func newFakeStat(t *testing.T) *fakeStat {
	t.Helper()
	s := &fakeStat{path: filepath.Join(t.TempDir(), "stat")}
	s.write(t)
	return s
}

// advance adds ticks to the counters, busy of them busy, and rewrites the
// file.
func (s *fakeStat) advance(t *testing.T, ticks, busy uint64) {
	t.Helper()
	s.total.Add(ticks)
	s.idle.Add(ticks - busy)
	s.write(t)
}

func (s *fakeStat) write(t *testing.T) {
	t.Helper()
	total, idle := s.total.Load(), s.idle.Load()
	line := fmt.Sprintf("cpu  %d 0 0 %d 0 0 0 0 0 0\ncpu0 0 0 0 0\nintr 1\n", total-idle, idle)
	tmp := s.path + ".tmp"
	if err := os.WriteFile(tmp, []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, s.path); err != nil {
		t.Fatal(err)
	}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestCPUFollowsTheMachine(t *testing.T) {
	t.Parallel()
	stat := newFakeStat(t)
	cpu := &host.CPU{Path: stat.path, Period: 5 * time.Millisecond}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- cpu.Run(ctx) }()

	// The sampler reads the file every period; the machine's counters
	// move only when the test advances them, a millisecond's worth at a
	// time, at the busy share it says.
	run := func(busy uint64, d time.Duration) {
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(time.Millisecond) {
			stat.advance(t, 1000, busy)
		}
	}
	until := func(what string, busy uint64, cond func() bool) {
		t.Helper()
		eventually(t, what, func() bool { stat.advance(t, 1000, busy); return cond() })
	}
	until("a fully busy machine to count as saturated", 990, cpu.Saturated)
	run(900, 30*time.Millisecond) // between the thresholds
	if !cpu.Saturated() {
		t.Fatal("a machine 90 % busy stopped counting as saturated; it should until below 85 %")
	}
	until("a half-busy machine to clear", 500, func() bool { return !cpu.Saturated() })
	run(900, 30*time.Millisecond)
	if cpu.Saturated() {
		t.Fatal("a machine 90 % busy counted as saturated; it should only from 95 %")
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run after cancel = %v, want nil", err)
	}
	if cpu.Saturated() {
		t.Error("a stopped CPU still reports saturation")
	}
}

func TestCPUWithoutStatistics(t *testing.T) {
	t.Parallel()
	cpu := &host.CPU{Path: filepath.Join(t.TempDir(), "missing")}
	if err := cpu.Run(t.Context()); err == nil {
		t.Fatal("Run on a missing statistics file = nil, want an error")
	}
	if cpu.Saturated() {
		t.Error("a CPU that could not read the machine reports saturation")
	}
}

func TestCPUStopsWhenTheStatisticsGoBad(t *testing.T) {
	t.Parallel()
	stat := newFakeStat(t)
	cpu := &host.CPU{Path: stat.path, Period: 5 * time.Millisecond}
	done := make(chan error, 1)
	go func() { done <- cpu.Run(t.Context()) }()
	eventually(t, "saturation", func() bool { stat.advance(t, 1000, 1000); return cpu.Saturated() })
	if err := os.WriteFile(stat.path, []byte("garbage\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Run on unreadable statistics = nil, want an error")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("gave up waiting for Run to stop on unreadable statistics")
	}
	if cpu.Saturated() {
		t.Error("a CPU that stopped reading still reports saturation")
	}
}
