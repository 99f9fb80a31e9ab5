package ports

import (
	"context"
	"net/http"
	"time"
)

// WebhookRequest is one signed POST to an endpoint.
type WebhookRequest struct {
	URL     string
	Header  http.Header
	Body    []byte
	Timeout time.Duration
}

// WebhookResponse is what came back. Body holds the first bytes of the
// response body, as many as the sender keeps (domain.DefaultResponseBody
// unless configured otherwise).
type WebhookResponse struct {
	StatusCode int
	// RetryAfter is the raw Retry-After header ("" when absent).
	RetryAfter string
	Body       []byte
	Duration   time.Duration
}

// Sender posts webhooks. Send is safe for concurrent use and reuses
// connections. It does not follow redirects: a 3xx is returned as the
// response. A transport failure (DNS, connect, TLS, timeout, forbidden
// destination, which wraps domain.ErrForbiddenDestination) is returned
// as an error, with Duration still set in the
// response.
type Sender interface {
	Send(ctx context.Context, req WebhookRequest) (WebhookResponse, error)
}
