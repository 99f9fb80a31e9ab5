package loadtest

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-webhooks/dispatch/adapters/redis/redistest"
)

// TestLimitsMeasuresEveryComponent runs each probe briefly against the
// servers the tests use and checks that every figure was measured and
// printed; the values themselves are the machine's.
func TestLimitsMeasuresEveryComponent(t *testing.T) {
	t.Parallel()
	redistest.Client(t) // fails with how to start Redis when it is down
	o := LimitsOptions{DatabaseURL: serverURL(), RedisURL: redistest.URL(), Duration: 150 * time.Millisecond, Concurrency: 4, Payload: 64}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	limits, err := MeasureLimits(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(limits) != 13 {
		t.Fatalf("%d figures, want 13: %+v", len(limits), limits)
	}
	var out bytes.Buffer
	if err := WriteLimits(&out, o, limits); err != nil {
		t.Fatal(err)
	}
	for _, l := range limits {
		if l.Ops <= 0 || l.Rate() <= 0 {
			t.Errorf("%s: %d operations in %s", l.Name, l.Ops, l.Per)
		}
		if !strings.Contains(out.String(), "| "+l.Name+" |") {
			t.Errorf("the table lacks %q:\n%s", l.Name, out.String())
		}
		if l.Busy <= 0 || l.MachineTime() <= 0 {
			t.Errorf("%s: machine busy %.2f cores, %s per operation", l.Name, l.Busy, l.MachineTime())
		}
	}
	if !strings.Contains(out.String(), "| W4 | ") {
		t.Errorf("no ceilings printed:\n%s", out.String())
	}
}

func TestMachineTimeIsTheMachinesBusyTimePerOperation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		l    Limit
		want time.Duration
	}{
		{Limit{Ops: 1000, Per: time.Second, Busy: 2}, 2 * time.Millisecond},
		{Limit{Ops: 50_000, Per: 5 * time.Second, Busy: 1.5}, 150 * time.Microsecond},
		{Limit{Ops: 1000, Per: time.Second}, 0}, // busy time unknown
		{Limit{Per: time.Second, Busy: 2}, 0},   // nothing done
	} {
		if got := tc.l.MachineTime(); got != tc.want {
			t.Errorf("%+v: %s, want %s", tc.l, got, tc.want)
		}
	}
}

// TestCeilingsSumTheStepsEachWorkloadCannotSkip checks the arithmetic of
// the ceilings: cores divided by the machine time of the steps summed.
func TestCeilingsSumTheStepsEachWorkloadCannotSkip(t *testing.T) {
	t.Parallel()
	perOp := func(name string, d time.Duration) Limit { // one core busy
		return Limit{Name: name, Ops: 1000, Per: 1000 * d, Busy: 1}
	}
	limits := []Limit{
		perOp(limitHTTP, 50*time.Microsecond),
		perOp(limitWebhookHTTP, 30*time.Microsecond),
		perOp(limitStorePublish0, 50*time.Microsecond),
		perOp(limitStorePublish1, 100*time.Microsecond),
		perOp(limitStoreDeliver, 150*time.Microsecond),
		perOp(limitBareInsert, 25*time.Microsecond),
		perOp(limitBareDeliver, 20*time.Microsecond),
	}
	var out bytes.Buffer
	if err := writeCeilings(&out, limits, 2); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| W1 | publish exchange + event stored | 25,000/s (80 µs) | 36,364/s (55 µs) |",       // 2 / (30+50), 2 / (30+25)
		"stored + take and record + webhook exchange | 6,452/s (310 µs) | 15,385/s (130 µs) |", // 2 / (30+30+100+150), 2 / (30+30+2×25+20)
		"(fan-out's insert left out) | 11,111/s (180 µs) | 40,000/s (50 µs) |",                 // 2 / (30+150), 2 / (30+20)
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("ceilings lack %q:\n%s", want, out.String())
		}
	}

	limits[1].Busy = 0 // /proc/stat unreadable
	out.Reset()
	if err := writeCeilings(&out, limits, 2); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "No ceilings") || strings.Contains(out.String(), "| W1 |") {
		t.Errorf("with a busy time unknown there must be no ceilings:\n%s", out.String())
	}
}
