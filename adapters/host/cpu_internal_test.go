package host

import (
	"errors"
	"testing"
)

func TestParseCPULine(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, line string
		want       cpuTimes
		err        bool
		shape      bool // the error is errCPULine: not the "cpu" line at all
	}{
		{"a current kernel", "cpu  4705 356 584 3699 23 23 0 7 11 13", cpuTimes{total: 4705 + 356 + 584 + 3699 + 23 + 23 + 0 + 7, idle: 3699 + 23, iowait: 23}, false, false},
		{"four counters (an old kernel)", "cpu 10 0 5 85", cpuTimes{total: 100, idle: 85}, false, false},
		{"iowait counts as idle, and apart", "cpu 10 0 0 50 40", cpuTimes{total: 100, idle: 90, iowait: 40}, false, false},
		{"steal counts as busy", "cpu 0 0 0 50 0 0 0 50", cpuTimes{total: 100, idle: 50}, false, false},
		{"guest time is not counted twice", "cpu 60 0 0 40 0 0 0 0 60 0", cpuTimes{total: 100, idle: 40}, false, false},
		{"one processor's line", "cpu0 10 0 5 85", cpuTimes{}, true, true},
		{"too few counters", "cpu 10 0 5", cpuTimes{}, true, true},
		{"a counter that is not a number", "cpu 10 x 5 85", cpuTimes{}, true, false},
		{"a negative counter", "cpu 10 -1 5 85", cpuTimes{}, true, false},
		{"empty", "", cpuTimes{}, true, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseCPULine(tc.line)
			if (err != nil) != tc.err {
				t.Fatalf("parseCPULine(%q) error = %v, want error %v", tc.line, err, tc.err)
			}
			if tc.shape && !errors.Is(err, errCPULine) {
				t.Errorf("parseCPULine(%q) error = %v, want errCPULine", tc.line, err)
			}
			if got != tc.want {
				t.Errorf("parseCPULine(%q) = %+v, want %+v", tc.line, got, tc.want)
			}
		})
	}
}

func FuzzParseCPULine(f *testing.F) {
	for _, seed := range []string{"cpu  4705 356 584 3699 23 23 0 7 11 13", "cpu 1 2 3 4", "cpu", "cpu0 1 2 3 4", "cpu 18446744073709551615 1 1 1"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, line string) {
		got, err := parseCPULine(line)
		if err != nil {
			if got != (cpuTimes{}) {
				t.Fatalf("parseCPULine(%q) failed (%v) but returned %+v", line, err, got)
			}
			return
		}
		// A parsed line's transitions are judged without panicking.
		_ = nextSaturated(false, cpuTimes{}, got)
		_ = nextSaturated(true, got, cpuTimes{total: got.total + 100, idle: got.idle})
	})
}

func TestNextSaturated(t *testing.T) {
	t.Parallel()
	at := func(busy float64) cpuTimes { // 1,000 ticks after zero, busy share of them
		return cpuTimes{total: 1000, idle: uint64(1000 - busy*1000)}
	}
	cases := []struct {
		name      string
		was       bool
		prev, now cpuTimes
		want      bool
	}{
		{"idle stays clear", false, cpuTimes{}, at(0), false},
		{"busy but below the threshold stays clear", false, cpuTimes{}, at(0.94), false},
		{"at the threshold turns saturated", false, cpuTimes{}, at(0.95), true},
		{"fully busy turns saturated", false, cpuTimes{}, at(1), true},
		{"saturated stays so above the clear threshold", true, cpuTimes{}, at(0.90), true},
		{"saturated stays so at the clear threshold", true, cpuTimes{}, at(0.85), true},
		{"saturated clears below it", true, cpuTimes{}, at(0.84), false},
		{"counters that did not move keep the state", true, cpuTimes{}, cpuTimes{}, true},
		{"waiting for the disk is spare to turn saturated", false, cpuTimes{}, cpuTimes{total: 1000, idle: 100, iowait: 90}, false},
		{"waiting for the disk is not spare to clear", true, cpuTimes{}, cpuTimes{total: 1000, idle: 400, iowait: 300}, true},
		{"idle beyond the disk's wait clears", true, cpuTimes{}, cpuTimes{total: 1000, idle: 400, iowait: 200}, false},
		{"an I/O wait counter that went back is no wait", true, cpuTimes{iowait: 500}, cpuTimes{total: 1000, idle: 400, iowait: 300}, false},
		{"counters that went back keep the state", true, cpuTimes{total: 2000, idle: 10}, cpuTimes{total: 1000, idle: 0}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := nextSaturated(tc.was, tc.prev, tc.now); got != tc.want {
				t.Errorf("nextSaturated(%v, %+v, %+v) = %v, want %v", tc.was, tc.prev, tc.now, got, tc.want)
			}
		})
	}
}

func TestSaturatedOver(t *testing.T) {
	t.Parallel()
	// window builds the counters read at each sample from the busy share
	// of each interval between them, 100 ticks each.
	window := func(busy ...float64) []cpuTimes {
		w := []cpuTimes{{}}
		for _, b := range busy {
			last := w[len(w)-1]
			w = append(w, cpuTimes{total: last.total + 100, idle: last.idle + uint64(100-b*100)})
		}
		return w
	}
	cases := []struct {
		name   string
		was    bool
		window []cpuTimes
		want   bool
	}{
		{"a busy last half period turns saturated after an idle first half", false, window(0, 0, 1, 1), true},
		{"one busy interval is not a half period", false, window(0, 0, 0, 1), false},
		{"a half period just short of the threshold stays clear", false, window(1, 1, 1, 0.88), false},
		{"a busy start of a window not yet full turns saturated", false, window(1), true},
		{"an idle last half period does not clear a busy whole", true, window(1, 1, 0.8, 0.8), true},
		{"an idle whole period clears", true, window(1, 0.7, 0.7, 0.7), false},
		{"the whole period at the clear threshold stays saturated", true, window(0.85, 0.85, 0.85, 0.85), true},
		{"a window of one sample judges nothing", true, window(), true},
	}
	for _, tc := range cases {
		if got := saturatedOver(tc.was, tc.window); got != tc.want {
			t.Errorf("%s: saturatedOver(was %v) = %v, want %v", tc.name, tc.was, got, tc.want)
		}
	}
}
