// Package webhook delivers webhooks over HTTP: Sender implements
// ports.Sender on a pooled net/http client that never follows redirects,
// bounds what it reads of a response, and refuses internal addresses at
// connect time (the SSRF guard). ForbiddenAddress and CheckURL expose the
// same guard for checking a subscription's URL when it is created or
// changed.
//
// Rule of dependency: this package imports ports, domain and the standard
// library only; net/http types stay inside it.
package webhook
