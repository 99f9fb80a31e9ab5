package bootstrap

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// sysmonTraceMillis is the schedtrace period SteadySysmon sets: the
// largest the runtime takes (int32 milliseconds, ~24.8 days). The runtime
// prints one line of scheduler statistics to stderr each period, counted
// from the machine's boot (its monotonic clock), so a process on a host up
// for longer prints one such line at its start.
const sysmonTraceMillis = 1<<31 - 1

// SteadySysmon re-executes the running program with GODEBUG's schedtrace
// set, which keeps the Go runtime's monitor thread (sysmon) out of its deep
// sleep, unless GODEBUG already sets schedtrace (the operator's choice,
// kept: GODEBUG=schedtrace=0 restores the runtime's default). It returns
// only when it did not re-execute; a program that could not be
// re-executed runs on as it is.
//
// Why: sysmon sleeps 20 µs at a time, doubling only after 50 quiet
// rounds, and whenever a process whose processors had all gone idle wakes
// from a system call it starts over at 20 µs. Dispatch's processes go idle
// and wake hundreds of times a second below saturation (each delivery
// waits on PostgreSQL, Redis and an endpoint), so their monitors spend
// most of their time in those short sleeps, each a timer and a thread
// wake-up: on a virtual machine ~20–27 µs of CPU apiece
// (docs/performance.md). With schedtrace set, sysmon never deep-sleeps, so it
// is never restarted at 20 µs: it backs off to its 10 ms ceiling while
// nothing needs it, and starts over only when it had work to do (a
// processor to retake from a long system call, a goroutine to preempt).
// An idle process then costs 100 monitor wake-ups a second instead of
// almost none. The runtime offers no other way to set this
// (golang/go#18236), and reads GODEBUG once, at start, so the setting
// needs a new process image.
func SteadySysmon() {
	env, changed := steadySysmonEnv(os.Environ())
	if !changed {
		return
	}
	exe, err := os.Executable()
	if err != nil {
		return
	}
	_ = syscall.Exec(exe, os.Args, env) // returns only when it failed
}

// steadySysmonEnv returns environ with schedtrace=sysmonTraceMillis added
// to GODEBUG, and whether it changed anything: not when GODEBUG already
// names schedtrace. Like the runtime, it reads the first GODEBUG entry.
func steadySysmonEnv(environ []string) ([]string, bool) {
	setting := "schedtrace=" + strconv.Itoa(sysmonTraceMillis)
	for i, kv := range environ {
		value, ok := strings.CutPrefix(kv, "GODEBUG=")
		if !ok {
			continue
		}
		for field := range strings.SplitSeq(value, ",") {
			if key, _, _ := strings.Cut(field, "="); key == "schedtrace" {
				return environ, false
			}
		}
		out := slices.Clone(environ)
		if value == "" {
			out[i] = "GODEBUG=" + setting
		} else {
			out[i] = kv + "," + setting
		}
		return out, true
	}
	return append(slices.Clone(environ), "GODEBUG="+setting), true
}
