package webhook

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"time"

	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// Sender defaults.
const (
	// DefaultMaxIdleConnsPerHost keeps a keep-alive connection for each of
	// the default 100 deliveries in flight per subscription. A caller that
	// may have more requests in flight to one host sets its own (the
	// worker: its concurrency), or the surplus reconnects.
	DefaultMaxIdleConnsPerHost = 100
	// DefaultTimeout bounds a request that carries no Timeout of its own
	// (the SPEC's default per-subscription timeout).
	DefaultTimeout = 10 * time.Second
)

// drainLimit is how much of a response body beyond domain.MaxResponseBody is
// read and discarded so the connection can go back to the pool. A body
// larger than that costs a new connection instead of unbounded reading.
const drainLimit = 64 << 10

// SenderOptions configures a Sender. The zero value is valid.
type SenderOptions struct {
	// MaxIdleConnsPerHost is how many idle keep-alive connections are kept
	// per endpoint host. Size it for the deliveries usually in flight to
	// one host, or bursts reconnect. 0 means DefaultMaxIdleConnsPerHost.
	MaxIdleConnsPerHost int
	// Policy decides which addresses deliveries may connect to; the zero
	// value refuses loopback, private, link-local and every other address
	// ForbiddenAddress refuses. Unless it permits everything, each
	// connection is checked after DNS resolution. Give the Guard the same
	// Policy.
	Policy Policy
	// DefaultTimeout applies to requests whose Timeout is 0. 0 means
	// DefaultTimeout.
	DefaultTimeout time.Duration
}

// Validate reports the first invalid option.
func (o SenderOptions) Validate() error {
	if o.MaxIdleConnsPerHost < 0 {
		return fmt.Errorf("webhook sender: max idle connections per host must be >= 0, got %d", o.MaxIdleConnsPerHost)
	}
	if o.DefaultTimeout < 0 {
		return fmt.Errorf("webhook sender: default timeout must be >= 0, got %s", o.DefaultTimeout)
	}
	if err := o.Policy.Validate(); err != nil {
		return fmt.Errorf("webhook sender: allowed targets: %w", err)
	}
	return nil
}

// Sender is ports.Sender on net/http. It is safe for concurrent use and
// keeps connections alive across sends; CloseIdleConnections releases them
// at shutdown.
type Sender struct {
	client         *http.Client
	transport      *http.Transport
	defaultTimeout time.Duration
}

var _ ports.Sender = (*Sender)(nil)

// NewSender returns a Sender. Options below their minimum (see Validate)
// take their defaults.
func NewSender(opts SenderOptions) *Sender {
	if opts.MaxIdleConnsPerHost <= 0 {
		opts.MaxIdleConnsPerHost = DefaultMaxIdleConnsPerHost
	}
	if opts.DefaultTimeout <= 0 {
		opts.DefaultTimeout = DefaultTimeout
	}
	dialer := &net.Dialer{KeepAlive: 30 * time.Second}
	if !opts.Policy.AllowPrivate {
		policy := Policy{Allowed: slices.Clone(opts.Policy.Allowed)} // the caller may reuse its slice
		dialer.Control = policy.controlDial
	}
	transport := &http.Transport{
		// No proxy from the environment: the guard must see the endpoint's
		// own address, not a proxy's.
		Proxy:               nil,
		DialContext:         dialer.DialContext,
		ForceAttemptHTTP2:   true,
		MaxIdleConns:        0, // no global cap; the per-host cap bounds each endpoint
		MaxIdleConnsPerHost: opts.MaxIdleConnsPerHost,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: 10 * time.Second,
		// Webhook bodies are small and compressed responses would be
		// truncated compressed; ask for none.
		DisableCompression: true,
		// An endpoint is untrusted: do not buffer huge headers from it.
		MaxResponseHeaderBytes: 64 << 10,
	}
	return &Sender{
		client: &http.Client{
			Transport: transport,
			// A redirect is a failure to deliver (SPEC §3): hand the 3xx back.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		transport:      transport,
		defaultTimeout: opts.DefaultTimeout,
	}
}

// Send POSTs req.Body to req.URL with req.Header (the caller sets every
// header, user-agent and signature included) within req.Timeout. Duration
// runs from the start of the request to the end of reading the kept part of
// the body. Once a status line has arrived the endpoint has answered, so an
// error while reading the body only shortens Body.
func (s *Sender) Send(ctx context.Context, req ports.WebhookRequest) (ports.WebhookResponse, error) {
	timeout := req.Timeout
	if timeout <= 0 {
		timeout = s.defaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	httpReq, err := http.NewRequestWithContext(ctx, http.MethodPost, req.URL, bytes.NewReader(req.Body))
	if err != nil {
		return ports.WebhookResponse{}, fmt.Errorf("webhook: build request: %w", err)
	}
	if req.Header != nil {
		httpReq.Header = req.Header // not modified by the client; no copy needed
	}

	start := time.Now()
	resp, err := s.client.Do(httpReq)
	if err != nil {
		return ports.WebhookResponse{Duration: time.Since(start)}, fmt.Errorf("webhook: %w", err)
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, domain.MaxResponseBody))
	duration := time.Since(start)
	// Reading to EOF lets the transport reuse the connection; past the
	// limit, closing it is cheaper than reading on.
	_, _ = io.CopyN(io.Discard, resp.Body, drainLimit)
	_ = resp.Body.Close()

	return ports.WebhookResponse{
		StatusCode: resp.StatusCode,
		RetryAfter: resp.Header.Get("Retry-After"),
		Body:       body,
		Duration:   duration,
	}, nil
}

// CloseIdleConnections closes the kept-alive connections (at shutdown, or
// in tests that check for leaked goroutines). Send still works afterwards.
func (s *Sender) CloseIdleConnections() {
	s.transport.CloseIdleConnections()
}
