// Command dispatch-load measures Dispatch's throughput, latency, losses
// and memory under load: `dispatch-load [flags]` for one run,
// `dispatch-load bench` for the standard workloads. See package
// loadtest.
package main

import (
	"os"

	"github.com/dispatch-webhooks/dispatch/loadtest"
)

func main() {
	os.Exit(loadtest.Main(os.Args[1:], os.Stdout, os.Stderr))
}
