// Command dispatch runs Dispatch: `dispatch <role> [flags]` where role is
// api, worker, scheduler, all, dev or migrate. Every flag can also be set
// through the environment; `dispatch <role> -h` lists them. `dispatch
// openapi [--version 3.1|3.0]` prints the API's OpenAPI document.
package main

import (
	"os"

	"github.com/dispatch-webhooks/dispatch/bootstrap"
)

func main() {
	os.Exit(bootstrap.Main(os.Args[1:], os.Stdout, os.Stderr))
}
