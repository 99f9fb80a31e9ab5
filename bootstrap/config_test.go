package bootstrap_test

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-webhooks/dispatch/application"
	"github.com/dispatch-webhooks/dispatch/bootstrap"
)

// parseConfig sets the environment variable name to env for the test, then
// parses args over the defaults as the binary does and validates the result.
func parseConfig(t *testing.T, name, env string, args ...string) (bootstrap.Config, error) {
	t.Setenv(name, env)
	cfg := bootstrap.DefaultConfig()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg.Flags(fs)
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	return cfg, cfg.Validate()
}

func TestFanOutMaxUnreadConfig(t *testing.T) {
	parse := func(env string, args ...string) (bootstrap.Config, error) {
		return parseConfig(t, "DISPATCH_FANOUT_MAX_UNREAD", env, args...)
	}

	if got := bootstrap.DefaultConfig().FanOutMaxUnread; got != application.DefaultFanOutMaxUnread {
		t.Errorf("default = %d, want %d", got, application.DefaultFanOutMaxUnread)
	}
	for _, tc := range []struct {
		env  string
		args []string
		want int64
	}{
		{"0", nil, 0},
		{"20000", nil, 20000},
		{"20000", []string{"--fanout-max-unread", "500"}, 500},
	} {
		if cfg, err := parse(tc.env, tc.args...); err != nil || cfg.FanOutMaxUnread != tc.want {
			t.Errorf("env %q, args %q: %d, %v; want %d", tc.env, tc.args, cfg.FanOutMaxUnread, err, tc.want)
		}
	}
	for _, tc := range []struct{ env, want string }{
		{"-1", "fanout-max-unread must be at least 0, got -1"},
		{"many", "$DISPATCH_FANOUT_MAX_UNREAD"},
	} {
		if _, err := parse(tc.env); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("DISPATCH_FANOUT_MAX_UNREAD=%q: error %v, want it to contain %q", tc.env, err, tc.want)
		}
	}
}

func TestWorkerReadWaitConfig(t *testing.T) {
	parse := func(env string, args ...string) (bootstrap.Config, error) {
		return parseConfig(t, "DISPATCH_WORKER_READ_WAIT", env, args...)
	}

	if got := bootstrap.DefaultConfig().WorkerReadWait; got != 0 {
		t.Errorf("default = %s, want 0: a worker reads as soon as it can unless told otherwise", got)
	}
	for _, tc := range []struct {
		env  string
		args []string
		want time.Duration
	}{
		{"0", nil, 0},
		{"64ms", nil, 64 * time.Millisecond},
		{"1s", nil, time.Second},
		{"64ms", []string{"--worker-read-wait", "8ms"}, 8 * time.Millisecond},
	} {
		if cfg, err := parse(tc.env, tc.args...); err != nil || cfg.WorkerReadWait != tc.want {
			t.Errorf("env %q, args %q: %s, %v; want %s", tc.env, tc.args, cfg.WorkerReadWait, err, tc.want)
		}
	}
	for _, tc := range []struct{ env, want string }{
		{"-1ms", "worker-read-wait must be 0..1s, got -1ms"},
		{"1001ms", "worker-read-wait must be 0..1s, got 1.001s"},
		{"soon", "$DISPATCH_WORKER_READ_WAIT"},
	} {
		if _, err := parse(tc.env); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("DISPATCH_WORKER_READ_WAIT=%q: error %v, want it to contain %q", tc.env, err, tc.want)
		}
	}
}
