package loadtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"syscall"
	"time"
)

// The operating system's own costs: what every hand-off between Dispatch's
// processes, PostgreSQL and Redis pays before any of them does its work.
// Virtual machines differ most here, and at light load, where each
// statement, command and request carries about one delivery, these costs
// are most of a delivery's.

// Names of the operating system's figures (no ceiling uses them).
const (
	limitSyscall          = "system calls/s, one core"
	limitProcessRoundTrip = "process round trips/s"
)

// probeOS measures a system call (a trivial one, from Go) and a round trip
// between two processes through pipes: a byte written to cat, which wakes,
// reads it and writes it back, and the prober, which wakes and reads it.
// That is two wake-ups of a sleeping process, as in every request and
// answer between Dispatch, PostgreSQL and Redis.
func probeOS(ctx context.Context, o LimitsOptions) ([]Limit, error) {
	const callsPerOp = 1000
	calls, err := hammer(ctx, 1, o.Duration, func(context.Context) (int, error) {
		for range callsPerOp {
			_, _, _ = syscall.Syscall(syscall.SYS_GETPPID, 0, 0, 0)
		}
		return callsPerOp, nil
	})
	if err != nil {
		return nil, err
	}
	calls.Name, calls.Notes = limitSyscall, "getppid through Go's syscall.Syscall, one goroutine"

	trips, err := probeProcessRoundTrips(ctx, o.Duration)
	if err != nil {
		return nil, fmt.Errorf("process round trips: %w", err)
	}
	return []Limit{calls, trips}, nil
}

// probeProcessRoundTrips bounces one byte off a cat process for d.
func probeProcessRoundTrips(ctx context.Context, d time.Duration) (Limit, error) {
	path, err := exec.LookPath("cat")
	if err != nil {
		return Limit{}, err
	}
	cmd := exec.Command(path)
	in, err := cmd.StdinPipe()
	if err != nil {
		return Limit{}, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return Limit{}, err
	}
	if err := cmd.Start(); err != nil {
		return Limit{}, err
	}
	defer func() {
		_ = in.Close() // cat ends at EOF
		_ = cmd.Wait()
	}()
	ping, pong := []byte{'x'}, make([]byte, 1)
	l, err := hammer(ctx, 1, d, func(context.Context) (int, error) {
		if _, err := in.Write(ping); err != nil {
			return 0, err
		}
		if _, err := io.ReadFull(out, pong); err != nil {
			return 0, err
		}
		if pong[0] != ping[0] {
			return 0, errors.New("cat echoed another byte")
		}
		return 1, nil
	})
	l.Name, l.Notes = limitProcessRoundTrip, "one byte to cat and back through pipes, one at a time: two wake-ups of a sleeping process"
	return l, err
}
