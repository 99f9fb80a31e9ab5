package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// ClusterMasters is how many masters the test cluster has.
const ClusterMasters = 3

// Cluster is a real Redis Cluster of ClusterMasters masters (no replicas)
// on loopback ports, started from the redis-server and redis-cli on PATH.
type Cluster struct {
	// Addrs are the masters' host:port.
	Addrs []string
	dir   string
	procs []*exec.Cmd
}

// URL is go-redis's cluster URL of c: redis://h1:p1?addr=h2:p2&addr=h3:p3.
func (c *Cluster) URL() string {
	var b strings.Builder
	b.WriteString("redis://" + c.Addrs[0])
	for i, addr := range c.Addrs[1:] {
		if i == 0 {
			b.WriteString("?")
		} else {
			b.WriteString("&")
		}
		b.WriteString("addr=" + addr)
	}
	return b.String()
}

// StartCluster starts ClusterMasters `redis-server --cluster-enabled yes`
// without persistence on free loopback ports, joins them with `redis-cli
// --cluster create`, and waits until every node reports cluster_state:ok.
// Stop ends them.
func StartCluster(ctx context.Context) (*Cluster, error) {
	dir, err := os.MkdirTemp("", "redistest-cluster-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir}
	ports, err := freePorts(ClusterMasters)
	if err != nil {
		c.Stop()
		return nil, err
	}
	for _, port := range ports {
		p := strconv.Itoa(port)
		cmd := exec.Command("redis-server",
			"--cluster-enabled", "yes", "--port", p, "--bind", "127.0.0.1",
			"--cluster-config-file", filepath.Join(dir, "nodes-"+p+".conf"),
			"--save", "", "--appendonly", "no", "--dir", dir,
			"--logfile", filepath.Join(dir, p+".log"))
		if err := cmd.Start(); err != nil {
			c.Stop()
			return nil, fmt.Errorf("redistest: start redis-server on %s (is Redis installed?): %w", p, err)
		}
		c.procs = append(c.procs, cmd)
		c.Addrs = append(c.Addrs, "127.0.0.1:"+p)
	}
	for _, addr := range c.Addrs {
		if err := waitFor(ctx, addr, func(client *goredis.Client) (bool, error) {
			return client.Ping(ctx).Err() == nil, nil
		}); err != nil {
			c.Stop()
			return nil, fmt.Errorf("redistest: redis-server at %s did not answer: %w (log in %s)", addr, err, dir)
		}
	}
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput(); err != nil {
		c.Stop()
		return nil, fmt.Errorf("redistest: redis-cli --cluster create: %w\n%s", err, out)
	}
	for _, addr := range c.Addrs {
		if err := waitFor(ctx, addr, func(client *goredis.Client) (bool, error) {
			info, err := client.ClusterInfo(ctx).Result()
			return err == nil && strings.Contains(info, "cluster_state:ok"), nil
		}); err != nil {
			c.Stop()
			return nil, fmt.Errorf("redistest: cluster node %s never reported cluster_state:ok: %w", addr, err)
		}
	}
	return c, nil
}

// Stop kills the servers by PID and removes their directory.
func (c *Cluster) Stop() {
	for _, cmd := range c.procs {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	c.procs = nil
	_ = os.RemoveAll(c.dir)
}

// NodeClient is a client of the one master at addr, closed when the test
// ends: for per-node commands (INFO, FLUSHALL).
func NodeClient(t testing.TB, addr string) *goredis.Client {
	t.Helper()
	client := goredis.NewClient(&goredis.Options{Addr: addr})
	t.Cleanup(func() { _ = client.Close() })
	return client
}

// waitFor polls ready on a client of addr for up to 10 seconds.
func waitFor(ctx context.Context, addr string, ready func(*goredis.Client) (bool, error)) error {
	client := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1})
	defer func() { _ = client.Close() }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ok, err := ready(client)
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("timed out")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// freePorts finds n loopback ports that are free, each with its cluster bus
// port (port+10000) free too.
func freePorts(n int) ([]int, error) {
	var ports []int
	for tries := 0; len(ports) < n && tries < 100; tries++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if port+10000 > 65535 {
			continue
		}
		bus, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+10000))
		if err != nil {
			continue
		}
		_ = bus.Close()
		ports = append(ports, port)
	}
	if len(ports) < n {
		return nil, errors.New("redistest: no free ports for a cluster")
	}
	return ports, nil
}

// The cluster shared by a test binary: started by the first SharedCluster,
// stopped by StopSharedCluster (from TestMain).
var (
	shared     *Cluster
	sharedErr  error
	sharedOnce sync.Once
)

// SharedCluster is one Cluster for the whole test binary, started on first
// use; the binary's TestMain calls StopSharedCluster after m.Run. Tests
// share it with a key prefix each (Prefix works on it too). A cluster that
// cannot start fails the test rather than skipping it.
func SharedCluster(t testing.TB) *Cluster {
	t.Helper()
	sharedOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		shared, sharedErr = StartCluster(ctx)
	})
	if sharedErr != nil {
		t.Fatalf("redistest: %v", sharedErr)
	}
	return shared
}

// StopSharedCluster stops the cluster SharedCluster started, if any.
func StopSharedCluster() {
	if shared != nil {
		shared.Stop()
	}
}

// ClusterClient is a go-redis cluster client of the shared cluster, closed
// when the test ends.
func ClusterClient(t testing.TB) *goredis.ClusterClient {
	t.Helper()
	c := SharedCluster(t)
	opts, err := goredis.ParseClusterURL(c.URL())
	if err != nil {
		t.Fatalf("redistest: cluster URL %s: %v", c.URL(), err)
	}
	client := goredis.NewClusterClient(opts)
	t.Cleanup(func() { _ = client.Close() })
	return client
}

// ClusterPrefix returns a key prefix no other test uses, for tests on the
// shared cluster. Its keys are not deleted: the cluster goes with the test
// binary.
func ClusterPrefix(t testing.TB) string {
	t.Helper()
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "test:" + hex.EncodeToString(b[:]) + ":"
}
