package webhook_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatch-webhooks/dispatch/adapters/webhook"
	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// testProxy is an outbound proxy on 127.0.0.1 that records what it was
// asked for and the credentials it was given, then tunnels to the target.
type testProxy struct {
	url      string // for ParseOutboundProxy
	accepted atomic.Int64
	mu       sync.Mutex
	targets  []string
	auth     []string // "user:password", as received
	conns    sync.WaitGroup
}

func (p *testProxy) record(target, auth string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.targets = append(p.targets, target)
	p.auth = append(p.auth, auth)
}

func (p *testProxy) seen() (targets, auth []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.targets...), append([]string(nil), p.auth...)
}

// tunnel copies both ways between a and b until either ends, then closes
// both. The caller has added its two goroutines to p.conns, before the
// client could see the tunnel open and the test end.
func (p *testProxy) tunnel(a, b net.Conn) {
	var once sync.Once
	closeBoth := func() { _ = a.Close(); _ = b.Close() }
	go func() { defer p.conns.Done(); _, _ = io.Copy(a, b); once.Do(closeBoth) }()
	go func() { defer p.conns.Done(); _, _ = io.Copy(b, a); once.Do(closeBoth) }()
}

// newConnectProxy starts an HTTP proxy that answers CONNECT, or, with
// stall, accepts CONNECT and never answers.
func newConnectProxy(t *testing.T, user string, stall bool) *testProxy {
	t.Helper()
	p := &testProxy{}
	release := make(chan struct{})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodConnect {
			http.Error(w, "CONNECT only", http.StatusMethodNotAllowed)
			return
		}
		var auth string
		if h := r.Header.Get("Proxy-Authorization"); h != "" {
			req := &http.Request{Header: http.Header{"Authorization": {h}}}
			u, pw, _ := req.BasicAuth()
			auth = u + ":" + pw
		}
		p.record(r.Host, auth)
		if stall {
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		if user != "" && auth != user {
			w.WriteHeader(http.StatusProxyAuthRequired)
			return
		}
		target, err := net.Dial("tcp", r.Host)
		if err != nil {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		client, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			_ = target.Close()
			return
		}
		p.conns.Add(2)
		_, _ = rw.WriteString("HTTP/1.1 200 Connection established\r\n\r\n")
		_ = rw.Flush()
		p.tunnel(client, target)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			p.accepted.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(func() { close(release); srv.Close(); p.conns.Wait() })
	p.url = "http://" + srv.Listener.Addr().String()
	if user != "" {
		p.url = "http://" + user + "@" + srv.Listener.Addr().String()
	}
	return p
}

// newSOCKS5Proxy starts a SOCKS5 proxy (RFC 1928, with RFC 1929
// user/password authentication when user is set) that connects to the
// target it is asked for, or, with stall, reads nothing and never answers.
func newSOCKS5Proxy(t *testing.T, user string, stall bool) *testProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &testProxy{url: "socks5://" + ln.Addr().String()}
	if user != "" {
		p.url = "socks5://" + user + "@" + ln.Addr().String()
	}
	var open sync.Map
	p.conns.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.accepted.Add(1)
			open.Store(c, true)
			p.conns.Go(func() {
				if stall {
					_, _ = io.Copy(io.Discard, c)
					return
				}
				if target := p.socksHandshake(c, user); target != nil {
					p.conns.Add(2) // this goroutine is counted until then
					p.tunnel(c, target)
				} else {
					_ = c.Close()
				}
			})
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		open.Range(func(c, _ any) bool { _ = c.(net.Conn).Close(); return true })
		p.conns.Wait()
	})
	return p
}

// socksHandshake answers a client's greeting, authentication and CONNECT
// request, records the target, and returns the connection to it (nil on
// failure).
func (p *testProxy) socksHandshake(c net.Conn, user string) net.Conn {
	r := bufio.NewReader(c)
	head := make([]byte, 2)
	if _, err := io.ReadFull(r, head); err != nil || head[0] != 5 {
		return nil
	}
	methods := make([]byte, head[1])
	if _, err := io.ReadFull(r, methods); err != nil {
		return nil
	}
	var auth string
	if user == "" {
		_, _ = c.Write([]byte{5, 0})
	} else {
		_, _ = c.Write([]byte{5, 2})
		readField := func() string {
			n, _ := r.ReadByte()
			b := make([]byte, n)
			_, _ = io.ReadFull(r, b)
			return string(b)
		}
		if v, _ := r.ReadByte(); v != 1 {
			return nil
		}
		name := readField()
		auth = name + ":" + readField()
		if auth != user {
			_, _ = c.Write([]byte{1, 1})
			return nil
		}
		_, _ = c.Write([]byte{1, 0})
	}
	req := make([]byte, 4)
	if _, err := io.ReadFull(r, req); err != nil || req[1] != 1 {
		return nil
	}
	var host string
	switch req[3] {
	case 1, 4:
		ip := make([]byte, map[byte]int{1: 4, 4: 16}[req[3]])
		_, _ = io.ReadFull(r, ip)
		a, _ := netip.AddrFromSlice(ip)
		host = a.String()
	case 3:
		n, _ := r.ReadByte()
		name := make([]byte, n)
		_, _ = io.ReadFull(r, name)
		host = string(name)
	}
	port := make([]byte, 2)
	if _, err := io.ReadFull(r, port); err != nil {
		return nil
	}
	target := net.JoinHostPort(host, strconv.Itoa(int(binary.BigEndian.Uint16(port))))
	p.record(target, auth)
	conn, err := net.Dial("tcp", target)
	if err != nil {
		_, _ = c.Write([]byte{5, 5, 0, 1, 0, 0, 0, 0, 0, 0})
		return nil
	}
	_, _ = c.Write([]byte{5, 0, 0, 1, 0, 0, 0, 0, 0, 0})
	return conn
}

func proxySender(t *testing.T, proxyURL string, policy webhook.Policy) *webhook.Sender {
	t.Helper()
	proxy, err := webhook.ParseOutboundProxy(proxyURL)
	require.NoError(t, err)
	return newSender(t, webhook.SenderOptions{Policy: policy, Proxy: proxy})
}

// loopbackAllowed checks addresses as the zero Policy does, but lets
// loopback through, where the test endpoints are.
var loopbackAllowed = webhook.Policy{Allowed: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}}

var proxyKinds = []struct {
	name  string
	start func(t *testing.T, user string, stall bool) *testProxy
}{
	{"connect", newConnectProxy},
	{"socks5", newSOCKS5Proxy},
}

// TestSendThroughTheProxy: a delivery to a name goes through the proxy,
// which is asked for the address the guard checked and never the name,
// and given the configured credentials; the endpoint still sees the name
// as Host, and connections through the proxy are kept alive.
func TestSendThroughTheProxy(t *testing.T) {
	t.Parallel()
	for _, kind := range proxyKinds {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			hosts := make(chan string, 3)
			e := newEndpoint(t, func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				hosts <- r.Host
				w.WriteHeader(http.StatusNoContent)
			})
			_, port, err := net.SplitHostPort(strings.TrimPrefix(e.URL, "http://"))
			require.NoError(t, err)
			p := kind.start(t, "dispatch:s3cr%t", false)
			s := proxySender(t, strings.Replace(p.url, "s3cr%t", "s3cr%25t", 1), loopbackAllowed)

			for range 3 {
				resp, err := s.Send(t.Context(), ports.WebhookRequest{URL: "http://localhost:" + port + "/hook", Body: []byte("{}"), Timeout: 5 * time.Second})
				require.NoError(t, err)
				assert.Equal(t, http.StatusNoContent, resp.StatusCode)
				assert.Equal(t, "localhost:"+port, <-hosts, "the Host is the URL's name")
			}
			targets, auth := p.seen()
			assert.Equal(t, []string{"127.0.0.1:" + port}, targets, "one tunnel, to the checked address")
			assert.Equal(t, []string{"dispatch:s3cr%t"}, auth)
			assert.EqualValues(t, 1, e.newConns.Load())
		})
	}
}

// TestSendThroughTheProxySpeaksTLSToTheName: the TLS handshake inside the
// tunnel names the endpoint's host (SNI) and checks the certificate
// against it, not against the address the proxy was asked for: the test
// certificate is for 127.0.0.1 and example.com, so "localhost" fails.
func TestSendThroughTheProxySpeaksTLSToTheName(t *testing.T) {
	t.Parallel()
	sni := make(chan string, 1)
	e := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	e.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake
	e.TLS = &tls.Config{GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		sni <- hello.ServerName
		return nil, nil
	}}
	e.StartTLS()
	t.Cleanup(e.Close)
	_, port, err := net.SplitHostPort(strings.TrimPrefix(e.URL, "https://"))
	require.NoError(t, err)
	p := newConnectProxy(t, "", false)
	s := proxySender(t, p.url, loopbackAllowed)
	s.TrustRoots(e.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs)

	_, err = s.Send(t.Context(), ports.WebhookRequest{URL: "https://localhost:" + port + "/", Body: []byte("{}"), Timeout: 5 * time.Second})
	var wrongHost x509.HostnameError
	require.ErrorAs(t, err, &wrongHost)
	assert.Equal(t, "localhost", wrongHost.Host)
	assert.Equal(t, "localhost", <-sni)
	targets, _ := p.seen()
	assert.Equal(t, []string{"127.0.0.1:" + port}, targets)
}

// TestSendThroughTheProxyRefusesForbiddenTargets: a name that resolves to
// an address the policy refuses, or such an address itself, is refused
// before the proxy is contacted, permanently, as a direct send would be; a
// name that does not resolve fails before it too.
func TestSendThroughTheProxyRefusesForbiddenTargets(t *testing.T) {
	t.Parallel()
	for _, kind := range proxyKinds {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			p := kind.start(t, "", false)
			s := proxySender(t, p.url, webhook.Policy{}) // refuses loopback
			for _, url := range []string{"http://localhost:9/", "http://127.0.0.1:9/", "http://[::1]:9/", "http://127.1:9/"} {
				_, err := s.Send(t.Context(), ports.WebhookRequest{URL: url, Body: []byte("{}"), Timeout: 5 * time.Second})
				require.ErrorIs(t, err, domain.ErrForbiddenDestination, url)
				assert.Equal(t, domain.OutcomePermanent, domain.ClassifyError(err).Kind, url)
				assert.Empty(t, addressIn(strings.ReplaceAll(err.Error(), url, "")), "%s: %v", url, err)
			}

			// A name that does not resolve fails as a direct send does.
			_, err := s.Send(t.Context(), ports.WebhookRequest{URL: "http://nowhere.invalid/", Body: []byte("{}"), Timeout: 5 * time.Second})
			require.Error(t, err)
			assert.Equal(t, domain.OutcomeRetryable, domain.ClassifyError(err).Kind)
			assert.Empty(t, addressIn(err.Error()), "the error names an address: %v", err)
			assert.Zero(t, p.accepted.Load(), "the proxy was never contacted")
		})
	}
}

// TestSendThroughAProxyThatFails: a proxy that cannot be reached, that
// refuses the tunnel or that stalls fails the send with a retryable error
// that names neither the proxy's address nor the target's, and a stalling
// one within the send's timeout.
func TestSendThroughAProxyThatFails(t *testing.T) {
	t.Parallel()
	e := newEndpoint(t, func(http.ResponseWriter, *http.Request) {})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := ln.Addr().String()
	require.NoError(t, ln.Close())

	for _, tc := range []struct {
		name, proxy, want string
		timeout           bool
	}{
		{"unreachable connect", "http://" + closed, "outbound proxy: dial tcp: connect: connection refused", false},
		{"unreachable socks5", "socks5://" + closed, "outbound proxy: socks connect tcp: dial tcp: connect: connection refused", false},
		{"connect with wrong credentials", newConnectProxy(t, "dispatch:right", false).url + "x", "tunnel refused with status 407", false},
		{"socks5 with wrong credentials", newSOCKS5Proxy(t, "dispatch:right", false).url + "x", "username/password authentication failed", false},
		{"stalled connect", newConnectProxy(t, "", true).url, "outbound proxy: timed out", true},
		{"stalled socks5", newSOCKS5Proxy(t, "", true).url, "outbound proxy: timed out", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			proxyURL := tc.proxy
			if strings.HasSuffix(proxyURL, "x") { // a wrong password
				proxyURL = strings.Replace(strings.TrimSuffix(proxyURL, "x"), ":right@", ":wrong@", 1)
			}
			s := proxySender(t, proxyURL, loopbackAllowed)
			const timeout = 300 * time.Millisecond
			resp, err := s.Send(t.Context(), ports.WebhookRequest{URL: e.URL, Body: []byte("{}"), Timeout: timeout})
			require.Error(t, err)
			assert.Equal(t, domain.OutcomeRetryable, domain.ClassifyError(err).Kind)
			assert.Empty(t, addressIn(err.Error()), "the error names an address: %v", err)
			assert.NotContains(t, err.Error(), "wrong")
			assert.Contains(t, err.Error(), "outbound proxy: ")
			assert.Contains(t, err.Error(), tc.want)
			if tc.timeout {
				assert.ErrorIs(t, err, context.DeadlineExceeded)
				assert.Less(t, resp.Duration, 5*time.Second)
			}
		})
	}
	assert.Zero(t, e.newConns.Load())
}

func TestParseOutboundProxy(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"":                               "",
		"  ":                             "",
		"http://proxy.internal:3128":     "http://proxy.internal:3128",
		"http://u:p4ss@10.0.0.1:3128/":   "http://u:xxxxx@10.0.0.1:3128",
		"socks5://u:p4ss@[fd00::1]:1080": "socks5://u:xxxxx@[fd00::1]:1080",
		"SOCKS5://egress:1080":           "socks5://egress:1080",
	} {
		p, err := webhook.ParseOutboundProxy(in)
		if assert.NoError(t, err, in) {
			assert.Equal(t, want, p.String(), in)
			assert.Equal(t, want == "", p.IsZero(), in)
		}
	}
	for in, want := range map[string]string{
		"https://u:p4ss@proxy:3128":   `scheme "https" is not supported`,
		"socks5h://u:p4ss@proxy:1080": `scheme "socks5h" is not supported`,
		"proxy:3128":                  `scheme "proxy" is not supported`,
		"u:p4ss@proxy:3128":           `scheme "u" is not supported`,
		"http://u:p4ss@proxy":         "no port",
		"http://u:p4ss@proxy:0":       "no port",
		"http://u:p4ss@proxy:70000":   "no port",
		"http://u:p4ss@proxy:3128/x":  "has a path",
		"http://u:p4ss@proxy:3128?x":  "query",
		"http://:p4ss@proxy:3128":     "no user name",
		"http://u:p4%zz@proxy:3128":   "not a URL",
		"http:///":                    "no host",
	} {
		_, err := webhook.ParseOutboundProxy(in)
		if assert.Error(t, err, in) {
			assert.Contains(t, err.Error(), want, in)
			assert.NotContains(t, err.Error(), "p4", in)
		}
	}
}

// TestSendThroughTheProxyGoesAgainOnAConnectionTheEndpointClosed: when the
// endpoint closes kept-alive connections while they idle, the proxy closes
// its side of each tunnel, and the next sends go out on fresh tunnels
// rather than fail (see TestSendGoesAgainOnAConnectionTheEndpointClosed).
func TestSendThroughTheProxyGoesAgainOnAConnectionTheEndpointClosed(t *testing.T) {
	t.Parallel()
	for _, kind := range proxyKinds {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			const n = 8
			var hits atomic.Int64
			e := startEndpoint(t, func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				hits.Add(1)
			}, func(srv *http.Server) { srv.IdleTimeout = 10 * time.Millisecond })
			p := kind.start(t, "", false)
			s := proxySender(t, p.url, loopbackAllowed)
			for range 3 {
				sendAtOnce(t, s, e.URL, n)
				require.Eventually(t, func() bool { // the endpoint closes every one while they idle
					return e.closedConns.Load() == e.newConns.Load()
				}, 5*time.Second, time.Millisecond)
				time.Sleep(webhook.PeekAfterIdle) // quiet long enough to be checked before use
			}
			assert.Equal(t, int64(3*n), hits.Load(), "each send reached the endpoint once")
		})
	}
}
