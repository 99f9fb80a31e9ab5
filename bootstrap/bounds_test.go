package bootstrap_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dispatch-webhooks/dispatch/adapters/postgres/pgtest"
	"github.com/dispatch-webhooks/dispatch/adapters/redis/redistest"
	"github.com/dispatch-webhooks/dispatch/bootstrap"
)

// apiProcess is `dispatch api` running as a process of its own, so that
// its memory and its temporary files are its own.
type apiProcess struct {
	base string
	pid  int
	// tmp is the process's $TMPDIR.
	tmp string
}

// startAPIProcess runs `dispatch api` on a fresh database, with env added
// to its environment, and waits until it answers.
func startAPIProcess(t *testing.T, env ...string) *apiProcess {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	p := &apiProcess{base: "http://" + addr, tmp: t.TempDir()}
	cmd := exec.Command(dispatchBinary(t), string(bootstrap.RoleAPI))
	cmd.Env = append(os.Environ(),
		"DATABASE_URL="+pgtest.NewDatabase(t),
		"REDIS_URL="+redistest.URL(),
		"DISPATCH_REDIS_KEY_PREFIX="+redistest.Prefix(t),
		"DISPATCH_API_KEYS="+testKey,
		"DISPATCH_LISTEN_ADDR="+addr,
		"DISPATCH_LOG_LEVEL=warn",
		"TMPDIR="+p.tmp,
	)
	cmd.Env = append(cmd.Env, env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start api: %v", err)
	}
	p.pid = cmd.Process.Pid
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() && stderr.Len() > 0 {
			t.Logf("api process stderr:\n%s", stderr.String())
		}
	})
	waitFor(t, 30*time.Second, "the api process to answer /health", func() bool {
		res, err := http.Get(p.base + "/health")
		if err != nil {
			return false
		}
		_ = res.Body.Close()
		return res.StatusCode == http.StatusOK
	})
	return p
}

// memoryKiB reads a field (VmRSS, VmHWM) of the process's status.
func (p *apiProcess) memoryKiB(t *testing.T, field string) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", p.pid))
	if err != nil {
		t.Fatalf("the test reads the api's memory from /proc: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kib, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("%s: %v", field, err)
			}
			return kib
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, p.pid)
	return 0
}

// route is a method and a path to send a body to.
type route struct{ method, path string }

// everyRoute lists every operation of the API's OpenAPI document (path
// parameters filled in), POST to each of its paths, and the routes outside
// it: the document itself, the docs, /metrics, and paths nothing serves.
func (p *apiProcess) everyRoute(t *testing.T) []route {
	t.Helper()
	res, err := http.Get(p.base + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.NewDecoder(res.Body).Decode(&doc); err != nil {
		t.Fatalf("decode the OpenAPI document: %v", err)
	}
	param := regexp.MustCompile(`\{[^}]+\}`)
	var routes []route
	add := func(r route) {
		if !slices.Contains(routes, r) {
			routes = append(routes, r)
		}
	}
	for path, ops := range doc.Paths {
		path = param.ReplaceAllString(path, "x")
		for method := range ops {
			add(route{strings.ToUpper(method), path})
		}
		add(route{http.MethodPost, path})
	}
	if len(routes) < 15 {
		t.Fatalf("the OpenAPI document lists %d routes; want every operation", len(routes))
	}
	for _, path := range []string{"/health", "/ready", "/metrics", "/openapi.json", "/docs", "/nowhere", "/v1/nowhere"} {
		add(route{http.MethodGet, path})
		add(route{http.MethodPost, path})
	}
	return routes
}

// hostileBody is size bytes made as they are read, counting what was read
// in sent, optionally as a multipart form with one file.
type hostileBody struct {
	head, tail string
	left       int64
	sent       *atomic.Int64
}

func newHostileBody(size int64, multipart bool, sent *atomic.Int64) *hostileBody {
	b := &hostileBody{left: size, sent: sent}
	if multipart {
		b.head = "--bound\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f\"\r\nContent-Type: application/octet-stream\r\n\r\n"
		b.tail = "\r\n--bound--\r\n"
		b.left -= int64(len(b.head) + len(b.tail))
	}
	return b
}

func (b *hostileBody) Read(p []byte) (int, error) {
	n := 0
	switch {
	case b.head != "":
		n = copy(p, b.head)
		b.head = b.head[n:]
	case b.left > 0:
		n = int(min(int64(len(p)), b.left))
		for i := range n {
			p[i] = 'x'
		}
		b.left -= int64(n)
	case b.tail != "":
		n = copy(p, b.tail)
		b.tail = b.tail[n:]
	default:
		return 0, io.EOF
	}
	b.sent.Add(int64(n))
	return n, nil
}

// hostile is one request with a large body.
type hostile struct {
	route
	size      int64
	chunked   bool
	multipart bool
	key       bool
}

// outcome is how the server met a hostile request: its status, or the
// error the client saw, and how much of the body it sent.
type outcome struct {
	status int
	err    error
	sent   int64
}

func (p *apiProcess) send(t *testing.T, h hostile) outcome {
	t.Helper()
	var sent atomic.Int64
	var body io.Reader = newHostileBody(h.size, h.multipart, &sent)
	req, err := http.NewRequest(h.method, p.base+h.path, body)
	if err != nil {
		t.Fatal(err)
	}
	if h.chunked {
		req.ContentLength = -1
	} else {
		req.ContentLength = h.size
	}
	req.Header.Set("Content-Type", "application/json")
	if h.multipart {
		req.Header.Set("Content-Type", "multipart/form-data; boundary=bound")
	}
	if h.key {
		req.Header.Set("Authorization", "Bearer "+testKey)
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: time.Minute}
	res, err := client.Do(req)
	if err != nil {
		return outcome{err: err, sent: sent.Load()}
	}
	_, _ = io.Copy(io.Discard, res.Body)
	_ = res.Body.Close()
	return outcome{status: res.StatusCode, sent: sent.Load()}
}

// watchDir records every name that appears in dir until stop is called.
func watchDir(dir string) (stop func() []string) {
	done := make(chan struct{})
	var seen []string
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for {
			entries, _ := os.ReadDir(dir)
			for _, e := range entries {
				if !slices.Contains(seen, e.Name()) {
					seen = append(seen, e.Name())
				}
			}
			select {
			case <-done:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	return func() []string {
		close(done)
		<-finished
		return seen
	}
}

// A 30 MiB body without a key, to every route the API has and some it has
// not, declared or chunked, JSON or multipart, is refused before it is
// read: the api's memory grows by less than 64 MiB over all of them, four
// at a time, and nothing is written to its $TMPDIR. With the key, a body
// over the route's limit is 413 everywhere.
func TestHostileBodiesAreRefusedUnread(t *testing.T) {
	t.Parallel()
	p := startAPIProcess(t)
	routes := p.everyRoute(t)
	rss := p.memoryKiB(t, "VmRSS")

	const size = 30 << 20
	var attacks []hostile
	for _, r := range routes {
		attacks = append(attacks, hostile{route: r, size: size}, hostile{route: r, size: size, chunked: true})
	}
	for _, path := range []string{"/health", "/v1/subscriptions", "/v1/events", "/nowhere"} {
		attacks = append(attacks, hostile{route: route{http.MethodPost, path}, size: size, multipart: true})
	}

	stopWatching := watchDir(p.tmp)
	var wg sync.WaitGroup
	slots := make(chan struct{}, 4)
	outcomes := make([]outcome, len(attacks))
	for i, h := range attacks {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			outcomes[i] = p.send(t, h)
		}()
	}
	wg.Wait()
	spooled := stopWatching()

	for i, h := range attacks {
		o := outcomes[i]
		switch {
		case o.err != nil && o.sent == size:
			t.Errorf("%s %s (chunked %v, multipart %v): the whole body was sent, then %v", h.method, h.path, h.chunked, h.multipart, o.err)
		case o.err == nil && o.status != http.StatusUnauthorized && o.status != http.StatusRequestEntityTooLarge:
			t.Errorf("%s %s (chunked %v, multipart %v) without a key: %d after %d bytes, want 401 or 413",
				h.method, h.path, h.chunked, h.multipart, o.status, o.sent)
		}
	}
	grown := p.memoryKiB(t, "VmHWM") - rss
	t.Logf("the api's resident memory peaked %d KiB above its %d KiB before", grown, rss)
	if grown >= 64<<10 {
		t.Errorf("the api's resident memory peaked %d MiB above what it was before the %d requests; want < 64 MiB", grown>>10, len(attacks))
	}
	if len(spooled) > 0 {
		t.Errorf("the api wrote %q to its $TMPDIR", spooled)
	}

	// With the key, a body over the limit: 413 everywhere.
	for _, r := range routes {
		for _, chunked := range []bool{false, true} {
			h := hostile{route: r, size: bootstrap.DefaultMaxBodyBytes + 64<<10, chunked: chunked, key: true}
			if status, err := p.sendRaw(t, h); err != nil || status != http.StatusRequestEntityTooLarge {
				t.Errorf("%s %s with the key, %d bytes (chunked %v): %d %v, want 413", h.method, h.path, h.size, chunked, status, err)
			}
		}
	}
}

// sendRaw sends h on a connection of its own, writing the body while it
// reads the answer: a server that answers before reading the whole body
// and closes the connection makes net/http's client report its failed
// write instead of the answer.
func (p *apiProcess) sendRaw(t *testing.T, h hostile) (int, error) {
	t.Helper()
	var sent atomic.Int64
	req, err := http.NewRequest(h.method, p.base+h.path, newHostileBody(h.size, h.multipart, &sent))
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = h.size
	if h.chunked {
		req.ContentLength = -1
	}
	req.Header.Set("Content-Type", "application/json")
	if h.key {
		req.Header.Set("Authorization", "Bearer "+testKey)
	}
	conn, err := net.Dial("tcp", strings.TrimPrefix(p.base, "http://"))
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Minute))
	go func() { _ = req.Write(conn) }()
	res, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		return 0, err
	}
	_ = res.Body.Close()
	return res.StatusCode, nil
}
