// Package bootstrap assembles Dispatch: configuration, one fx module per
// area, and the roles (api, worker, scheduler, all, dev, migrate) built from
// them. It is the only package that knows every other package.
package bootstrap
