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
	if len(limits) != 6 {
		t.Fatalf("%d figures, want 6: %+v", len(limits), limits)
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
	}
}
