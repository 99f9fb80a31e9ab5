package webhook

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpproxy"
	"golang.org/x/net/http/httpproxy"
	"golang.org/x/net/proxy"

	"github.com/dispatch-webhooks/dispatch/domain"
)

// OutboundProxy is the proxy every delivery goes out through
// (DISPATCH_OUTBOUND_PROXY), so endpoints see one fixed egress address: an
// HTTP proxy asked for a CONNECT tunnel to every target, TLS or not, or a
// SOCKS5 proxy. The zero value connects to endpoints directly. The proxy's
// own address is trusted, as configuration; the targets it is asked for are
// checked by the SSRF guard as a direct connection's are, and named by IP
// address so that the proxy connects to the address that was checked.
//
// Its String leaves the password out, so a Config may be printed.
type OutboundProxy struct {
	url *url.URL
}

// ParseOutboundProxy parses http://[user:password@]host:port or
// socks5://[user:password@]host:port; an empty or blank string is the
// zero OutboundProxy. Its errors never repeat the password.
func ParseOutboundProxy(s string) (OutboundProxy, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return OutboundProxy{}, nil
	}
	const form = "want http://[user:password@]host:port (HTTP CONNECT) or socks5://[user:password@]host:port"
	u, err := url.Parse(s)
	if err != nil { // its text quotes the URL, password included
		return OutboundProxy{}, errors.New("not a URL; " + form)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "socks5":
		return OutboundProxy{}, fmt.Errorf("scheme %q is not supported; %s", u.Scheme, form)
	case u.Opaque != "" || u.Host == "":
		return OutboundProxy{}, errors.New("no host; " + form)
	case u.Path != "" && u.Path != "/", u.RawQuery != "", u.Fragment != "":
		return OutboundProxy{}, errors.New("has a path, query or fragment; " + form)
	case u.User != nil && u.User.Username() == "":
		return OutboundProxy{}, errors.New("has credentials but no user name; " + form)
	}
	if port, err := strconv.ParseUint(u.Port(), 10, 16); err != nil || port == 0 {
		return OutboundProxy{}, errors.New("no port, or not a port from 1 to 65535; " + form)
	}
	u.Path = ""
	return OutboundProxy{url: u}, nil
}

// IsZero reports whether p connects directly, through no proxy.
func (p OutboundProxy) IsZero() bool { return p.url == nil }

// String is the proxy's URL with its password replaced by "xxxxx"; "" for
// the zero OutboundProxy.
func (p OutboundProxy) String() string {
	if p.url == nil {
		return ""
	}
	return p.url.Redacted()
}

// proxyKeepAlive is the TCP keep-alive period of connections to the proxy,
// as of direct ones.
const proxyKeepAlive = 30 * time.Second

// dialThrough returns a Sender's dial function when deliveries go out
// through p: the target's name is resolved here, every address it has is
// checked with policy, and the proxy is asked for one of them, by address.
// The TLS handshake that follows still speaks to the name (SNI and
// certificate), as does the request's Host.
func (p OutboundProxy) dialThrough(policy Policy) fasthttp.DialFuncWithTimeout {
	return func(addr string, timeout time.Duration) (net.Conn, error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		target, err := checkedTarget(ctx, addr, policy)
		if err != nil {
			return nil, err
		}
		var conn net.Conn
		if p.url.Scheme == "socks5" {
			conn, err = p.socks(ctx, target)
		} else {
			conn, err = p.connect(target, time.Until(deadlineOf(ctx)))
		}
		if err != nil {
			return nil, &addressFree{text: "outbound proxy: " + describeProxyFailure(err), err: err}
		}
		return newCheckedConn(conn), nil
	}
}

func deadlineOf(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}

// connect opens a CONNECT tunnel to target through the HTTP proxy, with
// fasthttpproxy's dialer. Reaching the proxy and its answer to CONNECT
// each get what is left of the request's time, so a proxy that is slow to
// accept and then stalls may hold a send up to twice its timeout. The
// dialer is made for each connection, as its timeouts are fields; it
// resolves the proxy's name with Go's resolver rather than fasthttp's
// cache, whose cleaner would outlive it.
func (p OutboundProxy) connect(target string, timeout time.Duration) (net.Conn, error) {
	if timeout <= 0 {
		return nil, fasthttp.ErrDialTimeout
	}
	d := &fasthttpproxy.Dialer{
		TCPDialer:      fasthttp.TCPDialer{DisableDNSResolution: true, KeepAlive: proxyKeepAlive},
		Config:         httpproxy.Config{HTTPProxy: p.url.String(), HTTPSProxy: p.url.String()},
		DialDualStack:  true,
		Timeout:        timeout,
		ConnectTimeout: timeout,
	}
	dial, err := d.GetDialFunc(false)
	if err != nil {
		return nil, err
	}
	return dial(target)
}

// socks opens a SOCKS5 tunnel to target with golang.org/x/net/proxy, the
// library fasthttpproxy's SOCKS5 dialer wraps, called here with the
// request's deadline: fasthttpproxy's own dialer gives the SOCKS handshake
// no deadline, so a proxy that accepts and then stalls would hold a send
// forever. It returns the TCP connection to the proxy itself rather than
// the library's wrapper, which only adds the address the proxy bound, so
// that checkedConn can peek at it.
func (p OutboundProxy) socks(ctx context.Context, target string) (net.Conn, error) {
	forward := &socksForward{}
	d, err := proxy.FromURL(p.url, forward)
	if err != nil {
		return nil, err
	}
	cd, ok := d.(proxy.ContextDialer)
	if !ok {
		return nil, errors.New("socks5 dialer takes no context")
	}
	if _, err := cd.DialContext(ctx, "tcp", target); err != nil {
		return nil, err
	}
	return forward.conn, nil
}

// socksForward dials the SOCKS5 proxy and keeps the connection, which
// carries the tunnel as it is once the handshake is done.
type socksForward struct{ conn net.Conn }

func (f *socksForward) Dial(network, addr string) (net.Conn, error) {
	return f.DialContext(context.Background(), network, addr)
}

func (f *socksForward) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	d := net.Dialer{KeepAlive: proxyKeepAlive}
	c, err := d.DialContext(ctx, network, addr)
	f.conn = c
	return c, err
}

// checkedTarget resolves addr's host, refuses it unless policy permits
// every address it has (the proxy is given one of them, but the name could
// as well have returned another), and returns the address to ask the proxy
// for: the first IPv4 one if there is one, as fasthttp's own dialer
// prefers, and the first otherwise.
func checkedTarget(ctx context.Context, addr string, policy Policy) (string, error) {
	host, portText, err := net.SplitHostPort(addr)
	if err != nil {
		return "", errDialRefused
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil {
		return "", errDialRefused
	}
	if !policy.AllowPrivate && domain.AmbiguousNumericHost(host) {
		return "", errDialRefused // see the direct dial in NewSender
	}
	var addrs []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{ip}
	} else {
		if addrs, err = net.DefaultResolver.LookupNetIP(ctx, "ip", host); err != nil {
			return "", err
		}
		if len(addrs) == 0 {
			return "", &net.DNSError{Err: "no address", Name: host, IsNotFound: true}
		}
	}
	chosen := netip.Addr{}
	for _, a := range addrs {
		a = a.Unmap()
		if policy.refuses(a) != "" {
			return "", errDialRefused
		}
		if !chosen.IsValid() || a.Is4() && !chosen.Is4() {
			chosen = a
		}
	}
	return netip.AddrPortFrom(chosen, uint16(port)).String(), nil
}

// describeProxyFailure tells why the proxy gave no tunnel without naming
// the proxy's address or the target's: a timeout, the network error of
// reaching the proxy, the status it refused CONNECT with, or the SOCKS
// reply.
func describeProxyFailure(err error) string {
	var netErr net.Error
	var op *net.OpError
	switch {
	case errors.Is(err, fasthttp.ErrDialTimeout), errors.Is(err, fasthttp.ErrTimeout), errors.Is(err, context.DeadlineExceeded),
		errors.As(err, &netErr) && netErr.Timeout():
		return "timed out"
	case errors.As(err, &op):
		return describeWithoutAddresses(op)
	}
	// fasthttpproxy's refusal: "could not connect to proxy addr: <addr> status code: <code>".
	if _, code, ok := strings.Cut(err.Error(), "status code: "); ok {
		if n, convErr := strconv.Atoi(code); convErr == nil {
			return "tunnel refused with status " + strconv.Itoa(n)
		}
	}
	return "no tunnel"
}
