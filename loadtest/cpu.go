package loadtest

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of /proc CPU times: 100 on every Linux
// architecture Go supports.
const clockTicks = 100

// CPUUse is where the machine's CPU time went while the run was measured
// (first publish to the end of the drain), in cores busy on average. On a
// machine with other work on it, Other shows how much of the CPU the run
// did not have.
type CPUUse struct {
	Seconds float64 `json:"seconds"`
	// Machine is every CPU's non-idle time.
	Machine float64 `json:"machine_cores"`
	// Tool is dispatch-load itself: the load generator, the receiver and
	// the roles it runs in process.
	Tool float64 `json:"dispatch_load_cores"`
	// Workers are the worker processes.
	Workers float64 `json:"worker_cores"`
	// Roles are the api and scheduler processes, when they run apart
	// from the tool (Config.Processes).
	Roles float64 `json:"role_cores,omitempty"`
	// PostgreSQL is the backends connected to the run's database and the
	// server's shared processes (WAL writer, checkpointer, …).
	PostgreSQL float64 `json:"postgres_cores"`
	// Redis is the Redis server, when it runs on this machine.
	Redis float64 `json:"redis_cores"`
	// Other is Machine less the above: anything else on the machine.
	Other float64 `json:"other_cores"`
	// PerEventMs is the machine's CPU time per event accepted, in
	// milliseconds: Dispatch's processes, PostgreSQL and Redis, and also
	// the load generator and the receiver when the api runs inside the
	// tool (WithTool).
	PerEventMs float64 `json:"per_event_ms,omitempty"`
	WithTool   bool    `json:"per_event_with_tool,omitempty"`

	// dispatchTicks and toolTicks are the unrounded CPU times behind
	// Workers+Roles+PostgreSQL+Redis and Tool, so that PerEventMs does not
	// carry the cores' rounding: at 100 events/s, 0.01 core is 0.1 ms per
	// event.
	dispatchTicks, toolTicks int64
}

// perEvent sets PerEventMs for events accepted; withTool counts the
// tool's own CPU in, for a run whose api and scheduler run inside it.
func (u *CPUUse) perEvent(events int64, withTool bool) {
	if events <= 0 {
		return
	}
	ms := (u.Workers + u.Roles + u.PostgreSQL + u.Redis) * u.Seconds * 1000
	if withTool {
		ms += u.Tool * u.Seconds * 1000
	}
	if u.dispatchTicks > 0 {
		ms = float64(u.dispatchTicks) * 1000 / clockTicks
		if withTool {
			ms += float64(u.toolTicks) * 1000 / clockTicks
		}
	}
	u.PerEventMs = math.Round(ms/float64(events)*1000) / 1000
	u.WithTool = withTool
}

// cpuGroups names the processes whose CPU time a run attributes.
type cpuGroups struct {
	tool, workers, roles, postgres, redis []int
}

// cpuSample is the CPU time used so far: the machine's busy ticks, and
// each process's user+system ticks.
type cpuSample struct {
	at      time.Time
	busy    int64
	perPID  map[int]int64
	groups  cpuGroups
	machine bool // /proc/stat was readable
}

func takeCPUSample(g cpuGroups) cpuSample {
	s := cpuSample{at: time.Now(), perPID: map[int]int64{}, groups: g}
	if busy, err := machineBusyTicks(); err == nil {
		s.busy, s.machine = busy, true
	}
	for _, pids := range [][]int{g.tool, g.workers, g.roles, g.postgres, g.redis} {
		for _, pid := range pids {
			if t, err := processTicks(pid); err == nil {
				s.perPID[pid] = t
			}
		}
	}
	return s
}

// cpuBetween attributes the CPU time between two samples. A process that
// appeared in between counts from zero, one that vanished is left out.
func cpuBetween(start, end cpuSample) CPUUse {
	seconds := end.at.Sub(start.at).Seconds()
	if seconds <= 0 || !start.machine || !end.machine {
		return CPUUse{}
	}
	cores := func(ticks int64) float64 {
		return math.Round(float64(ticks)/clockTicks/seconds*100) / 100
	}
	group := func(pids []int) int64 {
		var total int64
		for _, pid := range pids {
			if t, ok := end.perPID[pid]; ok {
				total += t - start.perPID[pid]
			}
		}
		return total
	}
	u := CPUUse{
		Seconds:    math.Round(seconds*10) / 10,
		Machine:    cores(end.busy - start.busy),
		Tool:       cores(group(end.groups.tool)),
		Workers:    cores(group(end.groups.workers)),
		Roles:      cores(group(end.groups.roles)),
		PostgreSQL: cores(group(end.groups.postgres)),
		Redis:      cores(group(end.groups.redis)),
	}
	u.Other = math.Max(0, math.Round((u.Machine-u.Tool-u.Workers-u.Roles-u.PostgreSQL-u.Redis)*100)/100)
	u.toolTicks = group(end.groups.tool)
	u.dispatchTicks = group(end.groups.workers) + group(end.groups.roles) + group(end.groups.postgres) + group(end.groups.redis)
	return u
}

// machineBusyTicks sums the non-idle time of every CPU from /proc/stat.
func machineBusyTicks() (int64, error) {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := bytes.Cut(raw, []byte("\n"))
	fields := strings.Fields(string(line))
	if len(fields) < 8 || fields[0] != "cpu" {
		return 0, fmt.Errorf("unexpected /proc/stat line %q", line)
	}
	var busy int64
	// user nice system idle iowait irq softirq steal …: idle and iowait
	// are not busy; guest time is already inside user.
	for i, f := range fields[1:9] {
		if i == 3 || i == 4 {
			continue
		}
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("unexpected /proc/stat line %q", line)
		}
		busy += v
	}
	return busy, nil
}

// processTicks is a process's user+system time from /proc/<pid>/stat.
func processTicks(pid int) (int64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseProcessTicks(raw)
}

func parseProcessTicks(stat []byte) (int64, error) {
	// The command name may hold spaces and parentheses: fields are counted
	// from the last ')'.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("unexpected process stat %q", stat)
	}
	fields := strings.Fields(string(stat[i+1:]))
	// fields[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(fields) < 13 {
		return 0, fmt.Errorf("unexpected process stat %q", stat)
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("unexpected process stat %q", stat)
	}
	return utime + stime, nil
}
