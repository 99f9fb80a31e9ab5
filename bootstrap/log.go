package bootstrap

import (
	"log/slog"
	"os"

	"go.uber.org/fx/fxevent"
)

// newLogger returns the JSON logger every role writes to.
func newLogger(cfg Config) *slog.Logger {
	level, _ := cfg.slogLevel() // Validate has accepted it.
	return slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

// fxFailures is an fx logger that prints only what went wrong, so a healthy
// start is quiet.
type fxFailures struct{ log *slog.Logger }

// LogEvent logs fx events that carry an error.
func (l fxFailures) LogEvent(event fxevent.Event) {
	var err error
	switch e := event.(type) {
	case *fxevent.OnStartExecuted:
		err = e.Err
	case *fxevent.OnStopExecuted:
		err = e.Err
	case *fxevent.Provided:
		err = e.Err
	case *fxevent.Invoked:
		err = e.Err
	case *fxevent.Started:
		err = e.Err
	case *fxevent.Stopped:
		err = e.Err
	case *fxevent.RollingBack:
		err = e.StartErr
	}
	if err != nil {
		l.log.Error("startup or shutdown failed", "error", err)
	}
}
