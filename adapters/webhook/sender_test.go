package webhook_test

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/dispatch-webhooks/dispatch/adapters/webhook"
	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// TestMain checks that senders and test servers leave no goroutine behind.
// fasthttp's pool cleaners are the exception: each sleeps until its next
// idle check (up to the idle timeout) and then ends, its pool being empty
// once CloseIdleConnections has run. They hold no connection.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*Client).mCleaner"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"))
}

// endpoint is a receiver on 127.0.0.1 that counts the connections it
// accepts and closes.
type endpoint struct {
	*httptest.Server
	newConns, closedConns atomic.Int64
}

func newEndpoint(t testing.TB, h http.HandlerFunc) *endpoint {
	t.Helper()
	return startEndpoint(t, h, func(*http.Server) {})
}

// startEndpoint starts an endpoint after configure has set up its server.
func startEndpoint(t testing.TB, h http.HandlerFunc, configure func(*http.Server)) *endpoint {
	t.Helper()
	e := &endpoint{}
	e.Server = httptest.NewUnstartedServer(h)
	configure(e.Config)
	e.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			e.newConns.Add(1)
		case http.StateClosed, http.StateHijacked:
			e.closedConns.Add(1)
		}
	}
	e.Start()
	t.Cleanup(e.Close)
	return e
}

func newSender(t testing.TB, opts webhook.SenderOptions) *webhook.Sender {
	t.Helper()
	s := webhook.NewSender(opts)
	t.Cleanup(s.CloseIdleConnections)
	return s
}

func TestSendPostsHeadersAndBody(t *testing.T) {
	t.Parallel()
	type seen struct {
		method, contentType, signature, userAgent string
		body                                      []byte
	}
	got := make(chan seen, 1)
	e := newEndpoint(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- seen{r.Method, r.Header.Get("Content-Type"), r.Header.Get("Webhook-Signature"), r.Header.Get("User-Agent"), body}
		w.Header().Set("Retry-After", "120")
		w.WriteHeader(http.StatusAccepted)
		_, _ = io.WriteString(w, "thanks")
	})
	s := newSender(t, webhook.SenderOptions{Policy: webhook.Policy{AllowPrivate: true}})

	header := http.Header{}
	header.Set("Content-Type", "application/json")
	header.Set("Webhook-Signature", "v1,abc")
	header.Set("User-Agent", "Dispatch/test")
	resp, err := s.Send(t.Context(), ports.WebhookRequest{
		URL: e.URL + "/hook", Header: header, Body: []byte(`{"id":"evt_1"}`), Timeout: 5 * time.Second,
	})
	require.NoError(t, err)
	assert.Equal(t, http.StatusAccepted, resp.StatusCode)
	assert.Equal(t, "120", resp.RetryAfter)
	assert.Equal(t, "thanks", string(resp.Body))
	assert.Positive(t, resp.Duration)

	r := <-got
	assert.Equal(t, http.MethodPost, r.method)
	assert.Equal(t, "application/json", r.contentType)
	assert.Equal(t, "v1,abc", r.signature)
	assert.Equal(t, "Dispatch/test", r.userAgent, "the caller's user-agent is sent as is")
	assert.JSONEq(t, `{"id":"evt_1"}`, string(r.body))
}

func TestSendDoesNotFollowRedirects(t *testing.T) {
	t.Parallel()
	var followed atomic.Int64
	e := newEndpoint(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/elsewhere" {
			followed.Add(1)
			return
		}
		http.Redirect(w, r, "/elsewhere", http.StatusTemporaryRedirect)
	})
	s := newSender(t, webhook.SenderOptions{Policy: webhook.Policy{AllowPrivate: true}})
	resp, err := s.Send(t.Context(), ports.WebhookRequest{URL: e.URL + "/hook", Body: []byte("{}"), Timeout: 5 * time.Second})
	require.NoError(t, err, "a redirect is a response, not a transport error")
	assert.Equal(t, http.StatusTemporaryRedirect, resp.StatusCode)
	assert.Zero(t, followed.Load(), "the redirect must not be followed")
}

func TestSendTruncatesBodyAndReusesConnection(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", domain.DefaultResponseBody) + strings.Repeat("y", 20<<10)
	e := newEndpoint(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, big)
	})
	s := newSender(t, webhook.SenderOptions{Policy: webhook.Policy{AllowPrivate: true}})
	for range 20 {
		resp, err := s.Send(t.Context(), ports.WebhookRequest{URL: e.URL, Body: []byte("{}"), Timeout: 5 * time.Second})
		require.NoError(t, err)
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		require.Len(t, resp.Body, domain.DefaultResponseBody, "only the first DefaultResponseBody bytes are kept")
		assert.Equal(t, big[:domain.DefaultResponseBody], string(resp.Body))
	}
	assert.Equal(t, int64(1), e.newConns.Load(), "sequential sends must reuse one keep-alive connection, draining what they do not keep")
}

// TestSendKeepsAsMuchOfTheBodyAsConfigured: KeepBody bounds what a
// response keeps, none when negative, and the rest is drained so the
// connection is used again.
func TestSendKeepsAsMuchOfTheBodyAsConfigured(t *testing.T) {
	t.Parallel()
	body := strings.Repeat("ab", 5000)
	for _, tc := range []struct {
		keep, want int
	}{{-1, 0}, {10, 10}, {8192, 8192}, {0, domain.DefaultResponseBody}} {
		e := newEndpoint(t, func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			_, _ = io.WriteString(w, body)
		})
		s := newSender(t, webhook.SenderOptions{Policy: webhook.Policy{AllowPrivate: true}, KeepBody: tc.keep})
		for range 3 {
			resp, err := s.Send(t.Context(), ports.WebhookRequest{URL: e.URL, Body: []byte("{}"), Timeout: 5 * time.Second})
			require.NoError(t, err)
			assert.Equal(t, body[:tc.want], string(resp.Body), "KeepBody %d", tc.keep)
		}
		assert.Equal(t, int64(1), e.newConns.Load(), "KeepBody %d: one connection, the rest of each body drained", tc.keep)
	}
	assert.Error(t, webhook.SenderOptions{KeepBody: domain.MaxResponseBody + 1}.Validate())
}

// TestSendReusesTheConnectionOfAnEmptyAnswer: an answer that says its body
// is empty (Content-Length: 0, as most endpoints' 200s) has nothing to
// read, and its connection goes back to the pool all the same.
func TestSendReusesTheConnectionOfAnEmptyAnswer(t *testing.T) {
	t.Parallel()
	e := newEndpoint(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Length", "0")
	})
	s := newSender(t, webhook.SenderOptions{Policy: webhook.Policy{AllowPrivate: true}})
	for range 20 {
		resp, err := s.Send(t.Context(), ports.WebhookRequest{URL: e.URL, Body: []byte("{}"), Timeout: 5 * time.Second})
		require.NoError(t, err)
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		assert.Empty(t, resp.Body)
	}
	assert.Equal(t, int64(1), e.newConns.Load(), "sequential sends must reuse one keep-alive connection")
}

func TestSendGivesUpOnHugeBodyWithoutReadingIt(t *testing.T) {
	t.Parallel()
	e := newEndpoint(t, func(w http.ResponseWriter, r *http.Request) {
		chunk := bytes.Repeat([]byte("z"), 32<<10)
		for range 1024 { // 32 MiB, far past the drain limit
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
	s := newSender(t, webhook.SenderOptions{Policy: webhook.Policy{AllowPrivate: true}})
	resp, err := s.Send(t.Context(), ports.WebhookRequest{URL: e.URL, Timeout: 5 * time.Second})
	require.NoError(t, err)
	assert.Len(t, resp.Body, domain.DefaultResponseBody)
}

func TestSendTimeout(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	e := newEndpoint(t, func(w http.ResponseWriter, r *http.Request) {
		// Reading the body lets the server notice the client hanging up.
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	t.Cleanup(func() { close(release) }) // runs before the server's Close
	s := newSender(t, webhook.SenderOptions{Policy: webhook.Policy{AllowPrivate: true}})

	const timeout = 100 * time.Millisecond
	resp, err := s.Send(t.Context(), ports.WebhookRequest{URL: e.URL, Body: []byte("{}"), Timeout: timeout})
	require.Error(t, err)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.GreaterOrEqual(t, resp.Duration, timeout, "Duration is set on a transport error")
	assert.Less(t, resp.Duration, 5*time.Second)

	// A request without a Timeout gets the sender's default.
	s = newSender(t, webhook.SenderOptions{Policy: webhook.Policy{AllowPrivate: true}, DefaultTimeout: timeout})
	_, err = s.Send(t.Context(), ports.WebhookRequest{URL: e.URL, Body: []byte("{}")})
	assert.ErrorIs(t, err, context.DeadlineExceeded)
}

func TestSendConnectionRefused(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())

	s := newSender(t, webhook.SenderOptions{Policy: webhook.Policy{AllowPrivate: true}})
	resp, err := s.Send(t.Context(), ports.WebhookRequest{URL: "http://" + addr, Timeout: 5 * time.Second})
	require.Error(t, err)
	assert.NotErrorIs(t, err, domain.ErrForbiddenDestination)
	var opErr *net.OpError
	assert.True(t, errors.As(err, &opErr), "the transport error is wrapped, not flattened: %v", err)
	assert.Positive(t, resp.Duration)
}

func TestSendRefusesPrivateDestinations(t *testing.T) {
	t.Parallel()
	e := newEndpoint(t, func(http.ResponseWriter, *http.Request) {})
	s := newSender(t, webhook.SenderOptions{}) // the zero Policy refuses loopback

	for _, url := range []string{
		e.URL, // 127.0.0.1
		strings.Replace(e.URL, "127.0.0.1", "localhost", 1), // a name resolving to loopback
	} {
		_, err := s.Send(t.Context(), ports.WebhookRequest{URL: url, Body: []byte("{}"), Timeout: 5 * time.Second})
		require.Error(t, err, url)
		assert.ErrorIs(t, err, domain.ErrForbiddenDestination, url)
	}
	assert.Zero(t, e.newConns.Load(), "the guard refuses before connecting")
}

func TestSendInvalidURL(t *testing.T) {
	t.Parallel()
	s := newSender(t, webhook.SenderOptions{Policy: webhook.Policy{AllowPrivate: true}})
	_, err := s.Send(t.Context(), ports.WebhookRequest{URL: "http://[::1", Timeout: time.Second})
	assert.Error(t, err)
}

func TestSendConcurrent(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	e := newEndpoint(t, func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, _ = io.Copy(w, r.Body)
	})
	s := newSender(t, webhook.SenderOptions{Policy: webhook.Policy{AllowPrivate: true}, MaxConnsPerHost: 16})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for range 25 {
				body := []byte{byte('a' + i)}
				resp, err := s.Send(t.Context(), ports.WebhookRequest{URL: e.URL, Body: body, Timeout: 5 * time.Second})
				if assert.NoError(t, err) {
					assert.Equal(t, body, resp.Body)
				}
			}
		})
	}
	wg.Wait()
	assert.Equal(t, int64(200), hits.Load())
	// A send that finds no idle connection dials while another may free
	// up, so a few more than 8 can open; never one per send.
	assert.Less(t, e.newConns.Load(), int64(50), "connections are pooled, not opened per send")
}

// TestSendKeepsAConnectionPerRequestInFlight sends rounds of n requests
// that the endpoint holds until all n have arrived, so n connections are
// in use at once: every later round reuses them.
func TestSendKeepsAConnectionPerRequestInFlight(t *testing.T) {
	t.Parallel()
	const n, rounds = 24, 3
	var (
		mu      sync.Mutex
		arrived int
		release = make(chan struct{})
	)
	e := newEndpoint(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		arrived++
		wait := release
		if arrived%n == 0 { // the round is complete: release it
			close(release)
			release = make(chan struct{})
		}
		mu.Unlock()
		<-wait
	})
	s := newSender(t, webhook.SenderOptions{Policy: webhook.Policy{AllowPrivate: true}, MaxConnsPerHost: n})
	for range rounds {
		sendAtOnce(t, s, e.URL, n)
	}
	assert.Equal(t, int64(n), e.newConns.Load(), "every round after the first reuses the connections of the first")
}

// sendAtOnce sends n requests to url at once and checks each was answered
// 200.
func sendAtOnce(t *testing.T, s *webhook.Sender, url string, n int) {
	t.Helper()
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			resp, err := s.Send(t.Context(), ports.WebhookRequest{URL: url, Body: []byte("{}"), Timeout: 5 * time.Second})
			if assert.NoError(t, err) {
				assert.Equal(t, http.StatusOK, resp.StatusCode)
			}
		})
	}
	wg.Wait()
}

// TestSendCapsConnectionsPerHost sends more requests at once than the cap
// allows: the surplus waits for a connection instead of opening one.
func TestSendCapsConnectionsPerHost(t *testing.T) {
	t.Parallel()
	const limit, sends = 4, 32
	var inFlight, most atomic.Int64
	e := newEndpoint(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		now := inFlight.Add(1)
		for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
		}
		time.Sleep(5 * time.Millisecond) // let the others pile up
		inFlight.Add(-1)
	})
	s := newSender(t, webhook.SenderOptions{Policy: webhook.Policy{AllowPrivate: true}, MaxConnsPerHost: limit})
	sendAtOnce(t, s, e.URL, sends)
	assert.LessOrEqual(t, e.newConns.Load(), int64(limit))
	assert.Equal(t, int64(limit), most.Load(), "the cap is used to the full, and never passed")
}

// TestSendGoesAgainOnAConnectionTheEndpointClosed lets the endpoint close
// kept-alive connections while they idle, as servers with a short
// keep-alive timeout do: the next sends find them closed and must go out
// on fresh ones, not fail.
func TestSendGoesAgainOnAConnectionTheEndpointClosed(t *testing.T) {
	t.Parallel()
	const n = 8
	var hits atomic.Int64
	e := startEndpoint(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		hits.Add(1)
	}, func(srv *http.Server) { srv.IdleTimeout = 10 * time.Millisecond })
	s := newSender(t, webhook.SenderOptions{Policy: webhook.Policy{AllowPrivate: true}})

	for range 3 {
		// From the second round on, every pooled connection was closed by
		// the endpoint: that must not fail a send.
		sendAtOnce(t, s, e.URL, n)
		require.Eventually(t, func() bool { // the endpoint closes every one while they idle
			return e.closedConns.Load() == e.newConns.Load()
		}, 5*time.Second, time.Millisecond)
		time.Sleep(webhook.PeekAfterIdle) // quiet long enough to be checked before use
	}
	assert.Equal(t, int64(3*n), hits.Load(), "each send reached the endpoint once")
}

// TestSendTriesTwiceAnEndpointThatHangsUp: an endpoint that closes the
// connection without answering may have closed it just as the request
// went out, so the request goes once more on a new connection, and no
// more: an endpoint that always hangs up costs two connections a send.
func TestSendTriesTwiceAnEndpointThatHangsUp(t *testing.T) {
	t.Parallel()
	var requests atomic.Int64
	e := newEndpoint(t, func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			_ = conn.Close()
		}
	})
	s := newSender(t, webhook.SenderOptions{Policy: webhook.Policy{AllowPrivate: true}})
	resp, err := s.Send(t.Context(), ports.WebhookRequest{URL: e.URL, Body: []byte("{}"), Timeout: 5 * time.Second})
	require.Error(t, err)
	assert.ErrorContains(t, err, "closed connection before returning the first response byte")
	assert.Positive(t, resp.Duration)
	assert.Equal(t, int64(2), requests.Load())
	assert.Equal(t, int64(2), e.newConns.Load())
}

func TestSendOverTLS(t *testing.T) {
	t.Parallel()
	e := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(w, r.Body)
	}))
	e.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake below
	e.StartTLS()
	t.Cleanup(e.Close)
	s := newSender(t, webhook.SenderOptions{Policy: webhook.Policy{AllowPrivate: true}})
	s.TrustRoots(e.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs)
	for range 3 {
		resp, err := s.Send(t.Context(), ports.WebhookRequest{URL: e.URL, Body: []byte(`{"tls":true}`), Timeout: 5 * time.Second})
		require.NoError(t, err)
		assert.Equal(t, `{"tls":true}`, string(resp.Body))
	}

	// An endpoint whose certificate is not trusted is not delivered to.
	untrusting := newSender(t, webhook.SenderOptions{Policy: webhook.Policy{AllowPrivate: true}})
	_, err := untrusting.Send(t.Context(), ports.WebhookRequest{URL: e.URL, Body: []byte("{}"), Timeout: 5 * time.Second})
	var unknown x509.UnknownAuthorityError
	assert.ErrorAs(t, err, &unknown)
}

func TestSendRefusesAnOversizedResponseHead(t *testing.T) {
	t.Parallel()
	e := newEndpoint(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("X-Padding", strings.Repeat("p", webhook.MaxResponseHeader))
	})
	s := newSender(t, webhook.SenderOptions{Policy: webhook.Policy{AllowPrivate: true}})
	_, err := s.Send(t.Context(), ports.WebhookRequest{URL: e.URL, Body: []byte("{}"), Timeout: 5 * time.Second})
	assert.Error(t, err)
}

func TestSendWritesTheCallersHeadersButNotItsFraming(t *testing.T) {
	t.Parallel()
	got := make(chan *http.Request, 1)
	e := newEndpoint(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		got <- r
	})
	s := newSender(t, webhook.SenderOptions{Policy: webhook.Policy{AllowPrivate: true}})
	header := http.Header{
		"X-Tenant":       {"a", "b"},
		"Host":           {"internal.example"},
		"Content-Length": {"1"},
		"Connection":     {"close"},
	}
	_, err := s.Send(t.Context(), ports.WebhookRequest{URL: e.URL + "/a//b", Header: header, Body: []byte(`{"x":1}`), Timeout: 5 * time.Second})
	require.NoError(t, err)
	r := <-got
	assert.Equal(t, []string{"a", "b"}, r.Header.Values("X-Tenant"))
	assert.Equal(t, strings.TrimPrefix(e.URL, "http://"), r.Host, "the Host is the URL's")
	assert.EqualValues(t, len(`{"x":1}`), r.ContentLength)
	assert.False(t, r.Close, "the connection is kept alive")
	assert.Equal(t, "/a//b", r.URL.Path, "the URL's path is sent as written")
}

func TestSendHonoursTheContext(t *testing.T) {
	t.Parallel()
	e := newEndpoint(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		time.Sleep(200 * time.Millisecond)
	})
	s := newSender(t, webhook.SenderOptions{Policy: webhook.Policy{AllowPrivate: true}})
	req := ports.WebhookRequest{URL: e.URL, Body: []byte("{}"), Timeout: 5 * time.Second}

	ended, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := s.Send(ended, req)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Zero(t, e.newConns.Load(), "an ended context sends nothing")

	short, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	resp, err := s.Send(short, req)
	assert.ErrorIs(t, err, context.DeadlineExceeded, "the context's deadline ends the request before its timeout")
	assert.Less(t, resp.Duration, time.Second)
}

func TestSenderOptionsValidate(t *testing.T) {
	t.Parallel()
	assert.NoError(t, webhook.SenderOptions{}.Validate())
	assert.Error(t, webhook.SenderOptions{MaxConnsPerHost: -1}.Validate())
	assert.Error(t, webhook.SenderOptions{DefaultTimeout: -time.Second}.Validate())
	err := webhook.SenderOptions{Policy: webhook.Policy{Allowed: []netip.Prefix{netip.MustParsePrefix("10.20.1.0/16")}}}.Validate()
	assert.ErrorContains(t, err, "webhook sender: allowed targets: entry 1 10.20.1.0/16: has bits set past the /16 prefix; did you mean 10.20.0.0/16?")
}

// TestSendAllowListPermitsOnlyItsRanges checks the connect-time guard with
// an allow-list: loopback is reached when 127.0.0.0/8 is listed, and refused,
// with the address named, when only another private range is.
func TestSendAllowListPermitsOnlyItsRanges(t *testing.T) {
	t.Parallel()
	e := newEndpoint(t, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	req := ports.WebhookRequest{URL: e.URL, Body: []byte("{}"), Timeout: 5 * time.Second}

	allowed := newSender(t, webhook.SenderOptions{Policy: webhook.Policy{Allowed: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}})
	resp, err := allowed.Send(t.Context(), req)
	require.NoError(t, err)
	assert.Equal(t, http.StatusNoContent, resp.StatusCode)

	other := newSender(t, webhook.SenderOptions{Policy: webhook.Policy{Allowed: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}})
	_, err = other.Send(t.Context(), req)
	require.ErrorIs(t, err, domain.ErrForbiddenDestination)
	assert.ErrorContains(t, err, "destination address is not allowed: a private, loopback or reserved address")
	assert.Empty(t, addressIn(err.Error()), "the refusal names no address: %v", err)
	assert.EqualValues(t, 1, e.newConns.Load(), "only the allowed sender connected")
}

// addressIn returns the first IP address (with or without a port) in
// text, or "" when there is none.
func addressIn(text string) string {
	isAddrChar := func(r rune) bool {
		return r >= '0' && r <= '9' || r >= 'a' && r <= 'f' || r >= 'A' && r <= 'F' || strings.ContainsRune(".:[]%", r)
	}
	for _, tok := range strings.FieldsFunc(text, func(r rune) bool { return !isAddrChar(r) }) {
		tok = strings.Trim(tok, ".:")
		if _, err := netip.ParseAddrPort(tok); err == nil {
			return tok
		}
		if _, err := netip.ParseAddr(strings.Trim(tok, "[]")); err == nil {
			return tok
		}
	}
	return ""
}

// TestSendErrorsNameNoAddress checks that a failed send's error, which
// becomes the attempt's error shown by the API, tells neither what the
// endpoint's name resolved to nor the DNS server asked, while still
// wrapping the transport error.
func TestSendErrorsNameNoAddress(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closedPort := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	e := newEndpoint(t, func(http.ResponseWriter, *http.Request) {})
	_, port, err := net.SplitHostPort(strings.TrimPrefix(e.URL, "http://"))
	require.NoError(t, err)

	open := newSender(t, webhook.SenderOptions{Policy: webhook.Policy{AllowPrivate: true}})
	guarded := newSender(t, webhook.SenderOptions{})
	tests := []struct {
		name   string
		sender *webhook.Sender
		url    string
	}{
		{"connection refused", open, fmt.Sprintf("http://localhost:%d/", closedPort)},
		{"name that does not resolve", open, "http://nowhere.invalid/"},
		{"name resolving to loopback", guarded, "http://localhost:" + port + "/"},
		{"loopback literal", guarded, e.URL},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { // not parallel: the count below follows them
			_, err := tc.sender.Send(t.Context(), ports.WebhookRequest{URL: tc.url, Body: []byte("{}"), Timeout: 5 * time.Second})
			require.Error(t, err)
			assert.Empty(t, addressIn(err.Error()), "the error names an address: %v", err)
			var netErr net.Error
			if tc.sender == open {
				assert.True(t, errors.As(err, &netErr), "the transport error is still wrapped: %v", err)
			} else {
				assert.ErrorIs(t, err, domain.ErrForbiddenDestination)
			}
		})
	}
	assert.Zero(t, e.newConns.Load(), "the guard refuses before connecting")
}

// TestSendRefusesHostsEndingInANumber checks the connect-time guard on
// hosts such as 127.1 or 2130706433: glibc's resolver reads them as IPv4
// addresses and Go's asks DNS, so the guard refuses them before either
// can, on every machine alike.
func TestSendRefusesHostsEndingInANumber(t *testing.T) {
	t.Parallel()
	e := newEndpoint(t, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	_, port, err := net.SplitHostPort(strings.TrimPrefix(e.URL, "http://"))
	require.NoError(t, err)
	guarded := newSender(t, webhook.SenderOptions{})
	for _, host := range []string{"127.1", "2130706433", "0x7f000001", "0x7f.1", "017700000001", "0177.0.0.1", "127.0.0.1."} {
		t.Run(host, func(t *testing.T) { // not parallel: the count below follows them
			_, err := guarded.Send(t.Context(), ports.WebhookRequest{URL: "http://" + host + ":" + port + "/", Body: []byte("{}"), Timeout: 5 * time.Second})
			assert.ErrorIs(t, err, domain.ErrForbiddenDestination)
		})
	}
	assert.Zero(t, e.newConns.Load(), "nothing reached the endpoint")
}

func BenchmarkSend(b *testing.B) {
	e := newEndpoint(b, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	})
	s := newSender(b, webhook.SenderOptions{Policy: webhook.Policy{AllowPrivate: true}})
	header := http.Header{"Content-Type": {"application/json"}, "User-Agent": {"Dispatch/bench"}}
	body := bytes.Repeat([]byte("x"), 1024)
	ctx := b.Context()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := s.Send(ctx, ports.WebhookRequest{URL: e.URL, Header: header, Body: body, Timeout: 5 * time.Second})
			if err != nil || resp.StatusCode != http.StatusNoContent {
				b.Errorf("send: %d %v", resp.StatusCode, err)
				return
			}
		}
	})
}
