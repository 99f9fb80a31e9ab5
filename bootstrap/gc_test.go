package bootstrap_test

import (
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"testing"

	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"github.com/dispatch-webhooks/dispatch/bootstrap"
)

// gcPercent is the process's GOGC now.
func gcPercent() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestWorkerGCTarget: a worker process collects at WorkerGCPercent while it
// runs and puts back what it found when it stops; GOGC in the environment
// wins. Not parallel: GOGC is the process's.
func TestWorkerGCTarget(t *testing.T) {
	debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(100) })
	for _, tc := range []struct {
		name         string
		operator     bool
		whileRunning int
	}{
		{"GOGC unset", false, bootstrap.WorkerGCPercent},
		{"GOGC set", true, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("GOGC", "100") // and restored as found when the test ends
			if !tc.operator {
				if err := os.Unsetenv("GOGC"); err != nil {
					t.Fatal(err)
				}
			}
			app := fxtest.New(t, fx.Supply(discardLogger()), bootstrap.WorkerGCModule)
			app.RequireStart()
			if got := gcPercent(); got != tc.whileRunning {
				t.Errorf("GOGC while the worker runs = %d, want %d", got, tc.whileRunning)
			}
			app.RequireStop()
			if got := gcPercent(); got != 100 {
				t.Errorf("GOGC after it stopped = %d, want 100 as before", got)
			}
		})
	}
}
