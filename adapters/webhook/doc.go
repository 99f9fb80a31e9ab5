// Package webhook delivers webhooks over HTTP: Sender implements
// ports.Sender on a pooled net/http client that never follows redirects,
// bounds what it reads of a response, and refuses internal addresses at
// connect time (the SSRF guard). Guard applies the same Policy to a
// subscription's URL when it is created or changed; Policy adds the
// exceptions of configuration (an allow-list, or everything) to
// ForbiddenAddress, and ParseAllowedTargets reads the allow-list.
//
// Rule of dependency: this package imports ports, domain and the standard
// library only; net/http types stay inside it.
package webhook
