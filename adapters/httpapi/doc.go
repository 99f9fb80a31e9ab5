// Package httpapi is Dispatch's HTTP API (SPEC §4) on huma v2: typed
// operations, an OpenAPI 3.1 document at /openapi.json, docs at /docs, and
// RFC 9457 problem+json errors.
//
// Rule of dependency: httpapi translates HTTP to application use cases and
// back; it imports application, domain, ports and huma. Status codes are
// chosen in one place, problem().
package httpapi
