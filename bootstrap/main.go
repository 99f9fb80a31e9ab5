package bootstrap

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.uber.org/fx"
)

// shutdownTimeout bounds graceful shutdown: in-flight deliveries finish
// within their own timeout (at most a minute).
const shutdownTimeout = 75 * time.Second

const usage = `Dispatch delivers webhooks.

Usage: dispatch <role> [flags]

Roles:
  api        the HTTP API: accepts events and manages subscriptions
  worker     fans events out and delivers them
  scheduler  re-enqueues due retries and lost work, reclaims dead consumers' entries
  all        every role in one process (applies migrations first)
  dev        every role with an embedded Redis and an in-memory store: nothing to install, nothing durable
  migrate    applies database migrations and exits

Run 'dispatch <role> -h' for the flags; each is also an environment variable.
`

// Main runs the command line and returns the exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, usage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	role := Role(args[0])
	cfg := DefaultConfig()
	if role == RoleDev {
		cfg.AllowPrivateTargets = true
		cfg.ListenAddr = DefaultListenAddr
	}
	fs := flag.NewFlagSet("dispatch "+string(role), flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg.Flags(fs)
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if role == RoleDev && len(cfg.APIKeys) == 0 {
		cfg.APIKeys = []string{devKey()}
	}
	opts, err := Options(role, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "dispatch %s: %v\n", role, err)
		return 2
	}
	app := fx.New(opts)
	if err := app.Err(); err != nil {
		fmt.Fprintf(stderr, "dispatch %s: %v\n", role, err)
		return 1
	}
	if err := run(app, role); err != nil {
		fmt.Fprintf(stderr, "dispatch %s: %v\n", role, err)
		return 1
	}
	return 0
}

// run starts app, waits for SIGINT/SIGTERM (or returns at once for
// migrate), then stops it gracefully.
func run(app *fx.App, role Role) error {
	startCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := app.Start(startCtx); err != nil {
		return err
	}
	if role != RoleMigrate {
		signals := make(chan os.Signal, 1)
		signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
		<-signals
		signal.Stop(signals)
	}
	stopCtx, cancelStop := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancelStop()
	return app.Stop(stopCtx)
}

func devKey() string {
	var b [18]byte
	_, _ = rand.Read(b[:])
	return "dev_" + base64.RawURLEncoding.EncodeToString(b[:])
}
