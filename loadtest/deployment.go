package loadtest

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/fx"

	"github.com/dispatch-webhooks/dispatch/adapters/nats"
	"github.com/dispatch-webhooks/dispatch/bootstrap"
)

// DispatchPackage is the import path of the dispatch binary, built for
// worker processes when no --dispatch-bin is given.
const DispatchPackage = "github.com/dispatch-webhooks/dispatch/bootstrap/cmd/dispatch"

// ProcessMemory is the peak resident memory of one Dispatch process.
type ProcessMemory struct {
	// Name says which roles the process runs.
	Name string `json:"name"`
	PID  int    `json:"pid"`
	// PeakRSSBytes is VmHWM from /proc/<pid>/status; 0 when unknown.
	PeakRSSBytes int64 `json:"peak_rss_bytes"`
	// Note qualifies the figure, e.g. that the process also runs the
	// load generator and the receiver.
	Note string `json:"note,omitempty"`
}

// deployment is Dispatch started by the tool: a fresh database, a Redis
// key prefix, api and scheduler (and, with Workers 0, a worker) as fx apps
// in this process, and worker processes.
type deployment struct {
	baseURL string
	apiKey  string

	admin    *pgx.Conn
	database string
	// dsn is the URL of the run's database.
	dsn string
	// roleEnv is added last to the environment of each role process
	// (Config.RoleEnv), so it overrides the tool's own settings.
	roleEnv  []string
	redis    *goredis.Client
	prefix   string
	apps     []*fx.App // in start order
	workers  []*workerProcess
	inWorker bool
	// roles are the api and scheduler processes of a run with
	// Config.Processes, in start order.
	roles []*workerProcess
	// queue is the run's queue settings, for deleting what it left on a
	// broker.
	queue bootstrap.Config
	// selfPeakNote qualifies this process's peak RSS when it could not be
	// started over for this deployment (see startPeakOver).
	selfPeakNote string
}

// workerProcess is a `dispatch <role>` process the tool started; exited
// is closed once it has exited and been waited for.
type workerProcess struct {
	name   string
	cmd    *exec.Cmd
	exited chan struct{}
}

// startDeployment creates the database and key prefix, migrates, and
// starts every role; on error it undoes what it did.
func startDeployment(ctx context.Context, cfg Config, dispatchBin string, stderr io.Writer) (d *deployment, err error) {
	d = &deployment{selfPeakNote: startPeakOver(), roleEnv: cfg.RoleEnv}
	defer func() {
		if err != nil {
			stopCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			err = errors.Join(err, d.stop(stopCtx))
			d = nil
		}
	}()
	suffix := randomHex(6)
	dsn, err := d.createDatabase(ctx, cfg.DatabaseURL, "loadtest_"+suffix)
	if err != nil {
		return d, err
	}
	d.dsn = dsn
	if err := d.openRedis(ctx, cfg.RedisURL, "loadtest:"+suffix+":"); err != nil {
		return d, err
	}

	dc := bootstrap.DefaultConfig()
	dc.DatabaseURL, dc.RedisURL, dc.RedisKeyPrefix = dsn, cfg.RedisURL, d.prefix
	dc.ListenAddr = "127.0.0.1:0"
	d.apiKey = "load_" + randomHex(16)
	dc.APIKeys = []string{d.apiKey}
	dc.AllowedTargets = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")} // the receiver, nothing else private
	dc.LogLevel = cfg.LogLevel
	if cfg.WorkerConcurrency > 0 {
		dc.WorkerConcurrency = cfg.WorkerConcurrency
	}
	// The run's queue, under a prefix of its own like its Redis keys.
	dc.Queue = cmp.Or(cfg.Queue, dc.Queue)
	dc.QueuePartitions = cmp.Or(cfg.QueuePartitions, dc.QueuePartitions)
	dc.QueuePrefix = "loadtest_" + suffix
	dc.NATSURL = cfg.NATSURL
	dc.KafkaBrokers = strings.Split(cfg.KafkaBrokers, ",")
	d.queue = dc

	// `dispatch migrate`, then the roles. With --processes the migration
	// is a process of the binary run too, so it applies that build's
	// migrations and sees --role-env like the roles.
	if cfg.Processes {
		if err := d.migrateProcess(ctx, dispatchBin, dc, stderr); err != nil {
			return d, err
		}
		if err := d.startRoleProcesses(ctx, dispatchBin, dc, stderr); err != nil {
			return d, err
		}
	} else {
		if _, err := d.startApp(ctx, bootstrap.RoleMigrate, dc); err != nil {
			return d, err
		}
		var api *bootstrap.APIServer
		if _, err := d.startApp(ctx, bootstrap.RoleAPI, dc, fx.Populate(&api)); err != nil {
			return d, err
		}
		d.baseURL = "http://" + api.Addr()
		if _, err := d.startApp(ctx, bootstrap.RoleScheduler, dc); err != nil {
			return d, err
		}
	}
	if cfg.Workers == 0 {
		d.inWorker = true
		_, err := d.startApp(ctx, bootstrap.RoleWorker, dc)
		return d, err
	}
	for i := range cfg.Workers {
		if err := d.startWorker(ctx, dispatchBin, dc, i+1, stderr); err != nil {
			return d, err
		}
	}
	return d, nil
}

func (d *deployment) createDatabase(ctx context.Context, serverURL, name string) (string, error) {
	admin, dsn, err := newDatabase(ctx, serverURL, name)
	if err != nil {
		return "", err
	}
	d.admin, d.database = admin, name
	return dsn, nil
}

// checkPostgresURL parses serverURL, which must be a postgres:// URL.
func checkPostgresURL(serverURL string) (*url.URL, error) {
	u, err := url.Parse(serverURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return nil, fmt.Errorf("--database-url must be a postgres:// URL, got %q", redact(serverURL))
	}
	return u, nil
}

// newDatabase creates database name on the PostgreSQL server of serverURL
// and returns a connection to that server (to count its processes and
// drop the database by) and the new database's URL.
func newDatabase(ctx context.Context, serverURL, name string) (admin *pgx.Conn, dsn string, err error) {
	u, err := checkPostgresURL(serverURL)
	if err != nil {
		return nil, "", err
	}
	// pool_* parameters are for Dispatch's pgxpool (and pass through to
	// it); a plain connection would send them to the server.
	admin, err = pgx.Connect(ctx, withoutPoolParams(*u))
	if err != nil {
		return nil, "", fmt.Errorf("connect to PostgreSQL at %s: %w", redact(serverURL), err)
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		_ = admin.Close(ctx)
		return nil, "", fmt.Errorf("create database %s: %w", name, err)
	}
	u.Path = "/" + name
	return admin, u.String(), nil
}

// connect opens a plain connection to the run's database.
func (d *deployment) connect(ctx context.Context) (*pgx.Conn, error) {
	u, err := url.Parse(d.dsn)
	if err != nil {
		return nil, fmt.Errorf("the run's database URL: %w", err)
	}
	conn, err := pgx.Connect(ctx, withoutPoolParams(*u))
	if err != nil {
		return nil, fmt.Errorf("connect to the run's database %s: %w", d.database, err)
	}
	return conn, nil
}

// withoutPoolParams is u without its pool_* parameters, for a plain
// connection.
func withoutPoolParams(u url.URL) string {
	q := u.Query()
	for k := range q {
		if strings.HasPrefix(k, "pool_") {
			q.Del(k)
		}
	}
	u.RawQuery = q.Encode()
	return u.String()
}

func (d *deployment) openRedis(ctx context.Context, redisURL, prefix string) error {
	opts, err := goredis.ParseURL(redisURL)
	if err != nil {
		return fmt.Errorf("--redis-url: %w", err)
	}
	d.redis = goredis.NewClient(opts)
	if err := d.redis.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("connect to Redis at %s: %w", redact(redisURL), err)
	}
	d.prefix = prefix
	return nil
}

// startApp starts role as an fx app; migrate is stopped again at once.
func (d *deployment) startApp(ctx context.Context, role bootstrap.Role, cfg bootstrap.Config, extra ...fx.Option) (*fx.App, error) {
	opts, err := bootstrap.Options(role, cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", role, err)
	}
	app := fx.New(opts, fx.Options(extra...))
	startCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := app.Start(startCtx); err != nil {
		return nil, fmt.Errorf("start %s: %w", role, err)
	}
	if role == bootstrap.RoleMigrate {
		stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return nil, app.Stop(stopCtx)
	}
	d.apps = append(d.apps, app)
	return app, nil
}

// startRoleProcesses runs api and scheduler as processes of the dispatch
// binary (Config.Processes), and points the run at the api's address.
func (d *deployment) startRoleProcesses(ctx context.Context, bin string, cfg bootstrap.Config, stderr io.Writer) error {
	apiAddr, err := freeAddr()
	if err != nil {
		return err
	}
	api, err := d.startProcess(ctx, bin, cfg, bootstrap.RoleAPI, "api", apiAddr,
		[]string{"DISPATCH_LISTEN_ADDR=" + apiAddr, "DISPATCH_API_KEYS=" + strings.Join(cfg.APIKeys, ",")}, stderr)
	if err != nil {
		return err
	}
	d.roles = append(d.roles, api)
	d.baseURL = "http://" + apiAddr
	adminAddr, err := freeAddr()
	if err != nil {
		return err
	}
	scheduler, err := d.startProcess(ctx, bin, cfg, bootstrap.RoleScheduler, "scheduler", adminAddr,
		[]string{"DISPATCH_ADMIN_ADDR=" + adminAddr}, stderr)
	if err != nil {
		return err
	}
	d.roles = append(d.roles, scheduler)
	return nil
}

// startWorker runs `dispatch worker` against the deployment's backends and
// waits until its /ready answers.
func (d *deployment) startWorker(ctx context.Context, bin string, cfg bootstrap.Config, n int, stderr io.Writer) error {
	adminAddr, err := freeAddr()
	if err != nil {
		return err
	}
	w, err := d.startProcess(ctx, bin, cfg, bootstrap.RoleWorker, fmt.Sprintf("worker %d", n), adminAddr,
		[]string{"DISPATCH_ADMIN_ADDR=" + adminAddr}, stderr)
	if err != nil {
		return err
	}
	d.workers = append(d.workers, w)
	return nil
}

// migrateProcess runs `dispatch migrate` as the roles will run: its
// migrations, and the history windows sized from the retention the
// roles are given (--role-env DISPATCH_RETENTION).
func (d *deployment) migrateProcess(ctx context.Context, bin string, cfg bootstrap.Config, stderr io.Writer) error {
	cmd := d.roleCommand(bin, cfg, bootstrap.RoleMigrate, "migrate", nil, stderr)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start migrate (%s): %w", bin, err)
	}
	stop := context.AfterFunc(ctx, func() { _ = cmd.Process.Kill() })
	defer stop()
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("dispatch migrate: %w; its stderr is above", err)
	}
	return nil
}

// roleCommand is `dispatch <role>` against the deployment's backends,
// with env and then the deployment's roleEnv added to its environment.
func (d *deployment) roleCommand(bin string, cfg bootstrap.Config, role bootstrap.Role, name string, env []string, stderr io.Writer) *exec.Cmd {
	cmd := exec.Command(bin, string(role))
	env = append(env,
		"DATABASE_URL="+cfg.DatabaseURL,
		"REDIS_URL="+cfg.RedisURL,
		"DISPATCH_REDIS_KEY_PREFIX="+cfg.RedisKeyPrefix,
		"DISPATCH_ALLOWED_TARGETS=127.0.0.1/32",
		"DISPATCH_WORKER_CONCURRENCY="+strconv.Itoa(cfg.WorkerConcurrency),
		"DISPATCH_LOG_LEVEL="+cfg.LogLevel,
		"DISPATCH_QUEUE="+cfg.Queue,
		"DISPATCH_QUEUE_PARTITIONS="+strconv.Itoa(cfg.QueuePartitions),
		"DISPATCH_QUEUE_PREFIX="+cfg.QueuePrefix,
		"NATS_URL="+cfg.NATSURL,
		"KAFKA_BROKERS="+strings.Join(cfg.KafkaBrokers, ","),
	)
	cmd.Env = processEnv(env, d.roleEnv)
	cmd.Stdout = io.Discard
	cmd.Stderr = newPrefixWriter(stderr, "["+name+"] ")
	return cmd
}

// startProcess runs `dispatch <role>` against the deployment's backends,
// with env and then the deployment's roleEnv added to its environment, and
// waits until /ready on readyAddr
// answers.
func (d *deployment) startProcess(ctx context.Context, bin string, cfg bootstrap.Config, role bootstrap.Role, name, readyAddr string, env []string, stderr io.Writer) (*workerProcess, error) {
	cmd := d.roleCommand(bin, cfg, role, name, env, stderr)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s (%s): %w", name, bin, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	p := &workerProcess{name: name, cmd: cmd, exited: exited}
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+readyAddr+"/ready", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, nil
			}
		}
		select {
		case <-exited:
			return nil, fmt.Errorf("%s exited before it was ready (%v); its stderr is above", name, cmd.ProcessState)
		case <-ctx.Done():
			p.kill()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.kill()
			return nil, fmt.Errorf("%s did not answer /ready on %s within 30s", name, readyAddr)
		}
	}
}

// processEnv is the environment of a role process: own (the tool's
// settings), this process's environment less any DISPATCH_* and backend
// URLs, so that the process's settings are the tool's and Dispatch's
// defaults, and roleEnv (Config.RoleEnv) last: of duplicate keys exec uses
// the last, so roleEnv wins.
func processEnv(own, roleEnv []string) []string {
	env := slices.Clone(own)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DISPATCH_") && !strings.HasPrefix(kv, "DATABASE_URL=") && !strings.HasPrefix(kv, "REDIS_URL=") &&
			!strings.HasPrefix(kv, "NATS_URL=") && !strings.HasPrefix(kv, "KAFKA_BROKERS=") {
			env = append(env, kv)
		}
	}
	return append(env, roleEnv...)
}

// kill ends a process that never became ready.
func (w *workerProcess) kill() {
	_ = w.cmd.Process.Kill()
	<-w.exited
}

// memory reads the peak RSS of every Dispatch process: each worker process,
// and this one, which runs the other roles as well as the load generator
// and the receiver.
func (d *deployment) memory() []ProcessMemory {
	roles := "api + scheduler"
	if d.inWorker {
		roles = "api + scheduler + worker"
	}
	self := ProcessMemory{
		Name: "dispatch-load (" + roles + " in process)", PID: os.Getpid(),
		Note: "also runs the load generator and the receiver" + d.selfPeakNote,
	}
	if len(d.roles) > 0 {
		self.Name, self.Note = "dispatch-load (load generator and receiver)", strings.TrimPrefix(d.selfPeakNote, "; ")
	}
	self.PeakRSSBytes, _ = PeakRSS(self.PID)
	out := []ProcessMemory{self}
	for _, w := range append(slices.Clone(d.roles), d.workers...) {
		p := ProcessMemory{Name: w.name, PID: w.cmd.Process.Pid}
		p.PeakRSSBytes, _ = PeakRSS(p.PID)
		out = append(out, p)
	}
	return out
}

// rss reads the resident memory now of every Dispatch process: the role
// processes and, when roles run inside it, this one.
func (d *deployment) rss() []ProcessRSS {
	var out []ProcessRSS
	if len(d.roles) == 0 {
		out = append(out, ProcessRSS{Name: "dispatch-load", PID: os.Getpid()})
	}
	for _, w := range append(slices.Clone(d.roles), d.workers...) {
		out = append(out, ProcessRSS{Name: w.name, PID: w.cmd.Process.Pid})
	}
	for i := range out {
		out[i].RSSBytes, _ = CurrentRSS(out[i].PID)
	}
	return out
}

// stop stops every role, newest first, then drops the database and the
// Redis keys. It is safe on a partly started deployment.
func (d *deployment) stop(ctx context.Context) error {
	var errs []error
	for _, w := range d.workers {
		errs = append(errs, w.stop(30*time.Second, w.name))
	}
	for i := len(d.roles) - 1; i >= 0; i-- {
		errs = append(errs, d.roles[i].stop(30*time.Second, d.roles[i].name))
	}
	for i := len(d.apps) - 1; i >= 0; i-- {
		if err := d.apps[i].Stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("stop role: %w", err))
		}
	}
	if d.database != "" {
		if _, err := d.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{d.database}.Sanitize()+" WITH (FORCE)"); err != nil {
			errs = append(errs, fmt.Errorf("drop database %s: %w", d.database, err))
		}
	}
	if d.admin != nil {
		_ = d.admin.Close(ctx)
	}
	if d.queue.Queue == bootstrap.QueueNATS {
		errs = append(errs, deleteNATSStreams(ctx, d.queue))
	}
	if d.redis != nil {
		if d.prefix != "" {
			errs = append(errs, deleteKeys(ctx, d.redis, d.prefix))
		}
		_ = d.redis.Close()
	}
	return errors.Join(errs...)
}

// stop asks the worker to stop gracefully, and kills it after grace.
func (w *workerProcess) stop(grace time.Duration, name string) error {
	select {
	case <-w.exited:
		return fmt.Errorf("%s had exited before the end of the run (%v)", name, w.cmd.ProcessState)
	default:
	}
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-w.exited:
		return nil
	case <-time.After(grace):
		_ = w.cmd.Process.Kill()
		<-w.exited
		return fmt.Errorf("%s did not stop within %s of SIGTERM; killed", name, grace)
	}
}

// deleteKeys unlinks every key under prefix, found with SCAN.
func deleteKeys(ctx context.Context, client *goredis.Client, prefix string) error {
	pattern := strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`).Replace(prefix) + "*"
	iter := client.Scan(ctx, 0, pattern, 500).Iterator()
	var batch []string
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) == 500 {
			if err := client.Unlink(ctx, batch...).Err(); err != nil {
				return fmt.Errorf("delete Redis keys under %s: %w", prefix, err)
			}
			batch = batch[:0]
		}
	}
	if err := iter.Err(); err != nil {
		return fmt.Errorf("scan Redis keys under %s: %w", prefix, err)
	}
	if len(batch) > 0 {
		if err := client.Unlink(ctx, batch...).Err(); err != nil {
			return fmt.Errorf("delete Redis keys under %s: %w", prefix, err)
		}
	}
	return nil
}

// BuildDispatch builds the dispatch binary into a temporary directory with
// `go build`; remove deletes it. It must run inside the module (the
// repository checkout).
func BuildDispatch(ctx context.Context) (path string, remove func(), err error) {
	dir, err := os.MkdirTemp("", "dispatch-load-bin-")
	if err != nil {
		return "", nil, err
	}
	remove = func() { _ = os.RemoveAll(dir) }
	gobin, err := exec.LookPath("go")
	if err != nil {
		return "", nil, fmt.Errorf("build dispatch: %w", err)
	}
	path = filepath.Join(dir, "dispatch")
	out, err := exec.CommandContext(ctx, gobin, "build", "-o", path, DispatchPackage).CombinedOutput()
	if err != nil {
		remove()
		return "", nil, fmt.Errorf("go build %s (run inside the repository, or pass --dispatch-bin): %v\n%s", DispatchPackage, err, out)
	}
	return path, remove, nil
}

// startPeakOver gives the memory this process freed back to the operating
// system and starts its peak RSS over from what is live now, so that a run
// reports its own peak: a bench runs every workload in one process, and the
// heap an earlier run grew (W3's 256 publishers, say) would otherwise be the
// peak of every run after it. It returns a note for the report when the
// peak could not be started over.
func startPeakOver() string {
	debug.FreeOSMemory()
	if err := resetPeakRSS(os.Getpid()); err != nil {
		return fmt.Sprintf("; peak since the process started, not since this run's (%v)", err)
	}
	return ""
}

// resetPeakRSS starts the peak resident set size (VmHWM) of process pid
// over from its resident set size now (Linux's clear_refs, "5").
func resetPeakRSS(pid int) error {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
}

// PeakRSS returns the peak resident set size (VmHWM) of process pid.
func PeakRSS(pid int) (int64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	return parseVmHWM(raw)
}

func parseVmHWM(status []byte) (int64, error) { return parseStatusKB(status, "VmHWM") }

// CurrentRSS returns the resident set size (VmRSS) of process pid now.
func CurrentRSS(pid int) (int64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	return parseStatusKB(raw, "VmRSS")
}

// parseStatusKB reads the "<field>: N kB" line of a /proc/<pid>/status, in
// bytes.
func parseStatusKB(status []byte, field string) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), field+":")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) != 2 || fields[1] != "kB" {
			return 0, fmt.Errorf("unexpected %s line %q", field, sc.Text())
		}
		kb, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("unexpected %s line %q", field, sc.Text())
		}
		return kb << 10, nil
	}
	return 0, fmt.Errorf("no %s line in the process status", field)
}

// freeAddr returns a loopback address with a port nothing listens on now.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	addr := ln.Addr().String()
	return addr, ln.Close()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// prefixWriter writes each line to w with a prefix, so worker logs can be
// told apart on the tool's stderr.
type prefixWriter struct {
	mu      sync.Mutex
	w       io.Writer
	prefix  string
	partial []byte
}

func newPrefixWriter(w io.Writer, prefix string) *prefixWriter {
	return &prefixWriter{w: w, prefix: prefix}
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.partial = append(p.partial, b...)
	for {
		i := bytes.IndexByte(p.partial, '\n')
		if i < 0 {
			break
		}
		line := append([]byte(p.prefix), p.partial[:i+1]...)
		_, _ = p.w.Write(line)
		p.partial = p.partial[i+1:]
	}
	return len(b), nil
}

// cpuGroups finds the processes of the run: this one, the workers, the
// PostgreSQL backends of the run's database with the server's shared
// processes, and the Redis server when it runs on this machine.
func (d *deployment) cpuGroups(ctx context.Context) cpuGroups {
	g := cpuGroups{tool: []int{os.Getpid()}}
	for _, w := range d.workers {
		g.workers = append(g.workers, w.cmd.Process.Pid)
	}
	for _, r := range d.roles {
		g.roles = append(g.roles, r.cmd.Process.Pid)
	}
	g.postgres, _ = postgresPIDs(ctx, d.admin, d.database)
	if info, err := d.redis.Info(ctx, "server").Result(); err == nil {
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, "process_id:"); ok {
				pid, _ := strconv.Atoi(v)
				comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
				if strings.Contains(string(comm), "redis") {
					g.redis = []int{pid}
				}
			}
		}
	}
	return g
}

// postgresPIDs are the PostgreSQL processes a run counts: the backends
// connected to database and the server's shared processes (WAL writer,
// checkpointer, …).
func postgresPIDs(ctx context.Context, admin *pgx.Conn, database string) ([]int, error) {
	rows, err := admin.Query(ctx,
		`SELECT pid FROM pg_stat_activity WHERE datname = $1 OR (datname IS NULL AND backend_type <> 'client backend')`, database)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int])
}

// union returns g with the pids of other added.
func (g cpuGroups) union(other cpuGroups) cpuGroups {
	merge := func(a, b []int) []int {
		seen := map[int]bool{}
		var out []int
		for _, pid := range append(append([]int(nil), a...), b...) {
			if !seen[pid] {
				seen[pid] = true
				out = append(out, pid)
			}
		}
		return out
	}
	return cpuGroups{
		tool: merge(g.tool, other.tool), workers: merge(g.workers, other.workers), roles: merge(g.roles, other.roles),
		postgres: merge(g.postgres, other.postgres), redis: merge(g.redis, other.redis),
	}
}

// deleteNATSStreams deletes the JetStream streams a run on NATS made.
// Kafka's topics stay (a test cluster in memory, or the brokers'
// retention); Redis keys go by prefix (deleteKeys).
func deleteNATSStreams(ctx context.Context, cfg bootstrap.Config) error {
	if err := nats.DeleteDeployment(ctx, cfg.NATSURL, cfg.QueuePrefix); err != nil {
		return fmt.Errorf("delete the run's NATS streams: %w", err)
	}
	return nil
}
