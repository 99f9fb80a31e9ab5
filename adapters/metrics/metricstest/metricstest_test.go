package metricstest_test

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dispatch-webhooks/dispatch/adapters/metrics/metricstest"
)

// failure records a Fatalf instead of failing the test that runs it.
type failure struct {
	testing.TB
	msg string
}

func (f *failure) Helper() {}

func (f *failure) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// fails runs read against a failure and returns what it failed with.
func fails(t *testing.T, read func(tb testing.TB)) string {
	t.Helper()
	f := &failure{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		read(f)
	}()
	<-done
	return f.msg
}

func TestValue(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	byOutcome := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "c_total", Help: "h"}, []string{"outcome", "kind"})
	level := prometheus.NewGauge(prometheus.GaugeOpts{Name: "g", Help: "h"})
	reg.MustRegister(byOutcome, level)
	byOutcome.WithLabelValues("delivered", "a").Add(3)
	byOutcome.WithLabelValues("dead", "a").Add(5)
	byOutcome.WithLabelValues("dead", "b").Add(7)
	level.Set(2.5)

	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"g", nil, 2.5},
		{"c_total", []string{"outcome", "delivered"}, 3},
		{"c_total", []string{"outcome", "dead", "kind", "b"}, 7},
		{"c_total", []string{"kind", "a", "outcome", "dead"}, 5},
	} {
		if got := metricstest.Value(t, reg, c.name, c.labels...); got != c.want {
			t.Errorf("Value(%s, %q) = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	for _, c := range []struct {
		what   string
		name   string
		labels []string
	}{
		{"no such metric", "missing", nil},
		{"no such series", "c_total", []string{"outcome", "retrying"}},
		{"labels not in pairs", "c_total", []string{"outcome"}},
	} {
		if msg := fails(t, func(tb testing.TB) { metricstest.Value(tb, reg, c.name, c.labels...) }); msg == "" {
			t.Errorf("%s: Value(%s, %q) did not fail", c.what, c.name, c.labels)
		}
	}
}
