package webhook_test

import (
	"bytes"
	"context"
	"errors"
	"io"
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
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// endpoint is a receiver on 127.0.0.1 that counts the connections it
// accepts.
type endpoint struct {
	*httptest.Server
	newConns atomic.Int64
}

func newEndpoint(t testing.TB, h http.HandlerFunc) *endpoint {
	t.Helper()
	e := &endpoint{}
	e.Server = httptest.NewUnstartedServer(h)
	e.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			e.newConns.Add(1)
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
	big := strings.Repeat("x", domain.MaxResponseBody) + strings.Repeat("y", 20<<10)
	e := newEndpoint(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, big)
	})
	s := newSender(t, webhook.SenderOptions{Policy: webhook.Policy{AllowPrivate: true}})
	for range 20 {
		resp, err := s.Send(t.Context(), ports.WebhookRequest{URL: e.URL, Body: []byte("{}"), Timeout: 5 * time.Second})
		require.NoError(t, err)
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		require.Len(t, resp.Body, domain.MaxResponseBody, "only the first MaxResponseBody bytes are kept")
		assert.Equal(t, big[:domain.MaxResponseBody], string(resp.Body))
	}
	assert.Equal(t, int64(1), e.newConns.Load(), "sequential sends must reuse one keep-alive connection, draining what they do not keep")
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
	assert.Len(t, resp.Body, domain.MaxResponseBody)
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
	s := newSender(t, webhook.SenderOptions{Policy: webhook.Policy{AllowPrivate: true}, MaxIdleConnsPerHost: 16})
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
// in use at once: with room for n idle connections every later round
// reuses them, while a smaller cap closes the surplus as each round ends
// and the next round dials it again.
func TestSendKeepsAConnectionPerRequestInFlight(t *testing.T) {
	t.Parallel()
	const n, rounds = 24, 3
	for _, tc := range []struct {
		name      string
		idle      int
		reconnect bool
	}{
		{"room for every one", n, false},
		{"room for half", n / 2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
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
			s := newSender(t, webhook.SenderOptions{Policy: webhook.Policy{AllowPrivate: true}, MaxIdleConnsPerHost: tc.idle})
			for range rounds {
				var wg sync.WaitGroup
				for range n {
					wg.Go(func() {
						resp, err := s.Send(t.Context(), ports.WebhookRequest{URL: e.URL, Body: []byte("{}"), Timeout: 5 * time.Second})
						if assert.NoError(t, err) {
							assert.Equal(t, http.StatusOK, resp.StatusCode)
						}
					})
				}
				wg.Wait()
			}
			if tc.reconnect {
				assert.Greater(t, e.newConns.Load(), int64(n), "a cap below the requests in flight closes connections that the next round dials again")
			} else {
				assert.Equal(t, int64(n), e.newConns.Load(), "every round after the first reuses the connections of the first")
			}
		})
	}
}

func TestSenderOptionsValidate(t *testing.T) {
	t.Parallel()
	assert.NoError(t, webhook.SenderOptions{}.Validate())
	assert.Error(t, webhook.SenderOptions{MaxIdleConnsPerHost: -1}.Validate())
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
	assert.ErrorContains(t, err, "destination address is not allowed: 127.0.0.1 (loopback)")
	assert.EqualValues(t, 1, e.newConns.Load(), "only the allowed sender connected")
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
