package loadtest

import (
	"testing"
	"time"
)

func TestParseProcessTicks(t *testing.T) {
	t.Parallel()
	// A command name with a space and a parenthesis, as a process may set.
	stat := "4242 (dispatch (x) y) S 1 4242 4242 0 -1 4194560 1000 0 0 0 350 120 0 0 20 0 9 0 100 0 0"
	got, err := parseProcessTicks([]byte(stat))
	if err != nil || got != 470 {
		t.Errorf("parseProcessTicks = %d, %v; want 350+120", got, err)
	}
	if _, err := parseProcessTicks([]byte("4242 (x) S 1")); err == nil {
		t.Error("a truncated stat line parsed without error")
	}
}

func TestCPUBetweenAttributesTicksToGroups(t *testing.T) {
	t.Parallel()
	at := time.Now()
	g := cpuGroups{tool: []int{1}, workers: []int{2, 3}, postgres: []int{4}, redis: []int{5}, roles: []int{6}}
	start := cpuSample{at: at, busy: 1000, machine: true, groups: g, perPID: map[int]int64{1: 100, 2: 50, 4: 10, 5: 0, 6: 0}}
	// Over 2 s: the machine was busy 300 ticks = 1.5 cores; pid 3 appeared
	// in between and counts from zero.
	end := cpuSample{at: at.Add(2 * time.Second), busy: 1300, machine: true, groups: g,
		perPID: map[int]int64{1: 140, 2: 70, 3: 20, 4: 110, 5: 10, 6: 30}}
	got := cpuBetween(start, end)
	want := CPUUse{Seconds: 2, Machine: 1.5, Tool: 0.2, Workers: 0.2, Roles: 0.15, PostgreSQL: 0.5, Redis: 0.05, Other: 0.4,
		dispatchTicks: 40 + 100 + 10 + 30, toolTicks: 40}
	if got != want {
		t.Errorf("cpuBetween = %+v, want %+v", got, want)
	}
	if busy, err := machineBusyTicks(); err != nil || busy <= 0 {
		t.Errorf("machineBusyTicks = %d, %v; want a positive count", busy, err)
	}
}

func TestCPUPerEventCountsDispatchPostgreSQLAndRedis(t *testing.T) {
	t.Parallel()
	u := CPUUse{Seconds: 10, Machine: 1.9, Tool: 0.5, Workers: 0.4, Roles: 0.3, PostgreSQL: 0.5, Redis: 0.1, Other: 0.1}
	u.perEvent(10_000, false)
	// (0.4 + 0.3 + 0.5 + 0.1) cores × 10 s over 10,000 events.
	if u.PerEventMs != 1.3 || u.WithTool {
		t.Errorf("roles apart: %v ms (with tool %v), want 1.3 without the tool", u.PerEventMs, u.WithTool)
	}
	u.perEvent(10_000, true)
	if u.PerEventMs != 1.8 || !u.WithTool {
		t.Errorf("roles in the tool: %v ms (with tool %v), want 1.8 with it", u.PerEventMs, u.WithTool)
	}
	u.PerEventMs = 0
	u.perEvent(0, false)
	if u.PerEventMs != 0 {
		t.Errorf("no events: %v ms, want none", u.PerEventMs)
	}
}

func TestCPUPerEventIsNotRoundedWithTheCores(t *testing.T) {
	t.Parallel()
	at := time.Unix(1_700_000_000, 0)
	g := cpuGroups{tool: []int{1}, workers: []int{2}, roles: []int{3}, postgres: []int{4}, redis: []int{5}}
	start := cpuSample{at: at, busy: 0, machine: true, groups: g, perPID: map[int]int64{1: 0, 2: 0, 3: 0, 4: 0, 5: 0}}
	// 10 s in which each process used 4 ticks (40 ms): 0.004 cores each,
	// which the report shows as 0.00.
	end := cpuSample{at: at.Add(10 * time.Second), busy: 50, machine: true, groups: g, perPID: map[int]int64{1: 4, 2: 4, 3: 4, 4: 4, 5: 4}}
	u := cpuBetween(start, end)
	if u.Workers != 0 || u.PostgreSQL != 0 {
		t.Fatalf("cores %+v, want them shown rounded to 0.00", u)
	}
	u.perEvent(100, false)
	// Four processes × 40 ms over 100 events.
	if u.PerEventMs != 1.6 {
		t.Errorf("per event %v ms, want 1.6 from the unrounded times", u.PerEventMs)
	}
	u.perEvent(100, true)
	if u.PerEventMs != 2 {
		t.Errorf("per event with the tool %v ms, want 2", u.PerEventMs)
	}
}
