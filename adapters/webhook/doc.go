// Package webhook delivers webhooks over HTTP: Sender implements
// ports.Sender on a pooled HTTP/1.1 client (fasthttp's) that never follows
// redirects, bounds what it reads of a response, does not lose a send to a
// kept-alive connection the endpoint closed, and refuses internal
// addresses at connect time (the SSRF guard), directly or through an
// OutboundProxy. Guard applies the same Policy to a
// subscription's URL when it is created or changed; Policy adds the
// exceptions of configuration (an allow-list, or everything) to
// ForbiddenAddress, and ParseAllowedTargets reads the allow-list.
//
// Rule of dependency: this package imports ports, domain and the standard
// library, fasthttp (with fasthttpproxy) and golang.org/x/net/proxy, whose
// types stay inside it.
package webhook
