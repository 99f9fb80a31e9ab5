package bootstrap

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.uber.org/fx"

	"github.com/dispatch-webhooks/dispatch/adapters/httpapi"
)

// shutdownTimeout bounds graceful shutdown: in-flight deliveries finish
// within their own timeout (at most a minute).
const shutdownTimeout = 75 * time.Second

const usage = `Dispatch delivers webhooks.

Usage: dispatch <role> [flags]
       dispatch openapi [--version 3.1|3.0]

Roles:
  api        the HTTP API: accepts events and manages subscriptions
  worker     fans events out and delivers them
  scheduler  re-enqueues due retries and lost work, reclaims dead consumers' entries
  all        every role in one process (applies migrations first)
  dev        every role with an in-memory store and queue and an embedded Redis: nothing to install, nothing durable
  migrate    applies database migrations and exits
  reencrypt  rewrites every subscription's secrets and headers under the first key of
             DISPATCH_ENCRYPTION_KEYS, in batches, reports how many rows it rewrote, and exits

Commands:
  openapi    prints the API's OpenAPI document as JSON and exits (no backends needed);
             --version 3.0 prints the document downgraded to OpenAPI 3.0.3, for generators

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
	if args[0] == "openapi" {
		return openapiCommand(args[1:], stdout, stderr)
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
// migrate and reencrypt, whose work is done by then), then stops it
// gracefully.
func run(app *fx.App, role Role) error {
	startCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := app.Start(startCtx); err != nil {
		return err
	}
	if role != RoleMigrate && role != RoleReencrypt {
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
	var b [32]byte
	_, _ = rand.Read(b[:])
	return "dev_" + base64.RawURLEncoding.EncodeToString(b[:])
}

// openapiCommand prints the OpenAPI document: `dispatch openapi [--version
// 3.1|3.0]`.
func openapiCommand(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("dispatch openapi", flag.ContinueOnError)
	fs.SetOutput(stderr)
	version := fs.String("version", "3.1", "OpenAPI version of the document: 3.1, or 3.0 (downgraded, for tools that read only 3.0)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "dispatch openapi: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	doc, err := OpenAPIDocument(*version)
	if err != nil {
		fmt.Fprintf(stderr, "dispatch openapi: %v\n", err)
		return 2
	}
	if _, err := stdout.Write(doc); err != nil {
		fmt.Fprintf(stderr, "dispatch openapi: %v\n", err)
		return 1
	}
	return 0
}

// OpenAPIDocument returns the API's OpenAPI document as indented JSON
// ending in a newline: version "3.1" as served at /openapi.json, or "3.0"
// as huma downgrades it (/openapi-3.0.json) for tools that read only 3.0.
// It registers the operations on a mux that never serves, with no use
// cases behind them, so it needs no backend.
func OpenAPIDocument(version string) ([]byte, error) {
	api := httpapi.New(http.NewServeMux(), httpapi.Config{Version: Version, MaxEventBytes: DefaultConfig().MaxEventBytes},
		httpapi.UseCases{}, slog.New(slog.DiscardHandler))
	var (
		raw []byte
		err error
	)
	switch version {
	case "3.1":
		raw, err = json.Marshal(api.OpenAPI())
	case "3.0":
		raw, err = api.OpenAPI().Downgrade()
	default:
		return nil, fmt.Errorf("--version must be 3.1 or 3.0, got %q", version)
	}
	if err != nil {
		return nil, fmt.Errorf("render the OpenAPI %s document: %w", version, err)
	}
	var out bytes.Buffer
	if err := json.Indent(&out, raw, "", "  "); err != nil {
		return nil, fmt.Errorf("indent the OpenAPI %s document: %w", version, err)
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}
