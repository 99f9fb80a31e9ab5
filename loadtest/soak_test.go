package loadtest

import (
	"bytes"
	"context"
	"errors"
	"image/png"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestSoakFlagsAreParsedAndChecked(t *testing.T) {
	t.Parallel()
	cfg, _, err := parseRun([]string{"--processes", "--duration", "30m", "--rate", "200",
		"--role-env", "DISPATCH_RETENTION=3m", "--role-env", "DISPATCH_LOG_LEVEL=a=b", "--sample-every", "1m"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.RoleEnv, []string{"DISPATCH_RETENTION=3m", "DISPATCH_LOG_LEVEL=a=b"}) || cfg.SampleEvery != time.Minute {
		t.Errorf("role env %q, sample every %s; want both --role-env in order and 1m", cfg.RoleEnv, cfg.SampleEvery)
	}
	if cfg.Events != 0 || cfg.PublishLimit() != 30*time.Minute {
		t.Errorf("--duration 30m alone publishes %d events for at most %s; want for the whole 30m", cfg.Events, cfg.PublishLimit())
	}
	if cfg, _, err := parseRun([]string{"--events", "500", "--duration", "1m"}, &bytes.Buffer{}); err != nil || cfg.Events != 500 {
		t.Errorf("--events 500 --duration 1m: %d events, %v; want 500", cfg.Events, err)
	}
	if cfg, _, err := parseRun([]string{"--sample-every", "2s"}, &bytes.Buffer{}); err != nil || cfg.SampleEvery != 2*time.Second {
		t.Errorf("--sample-every 2s with in-process roles: %v, %v; want it accepted", cfg.SampleEvery, err)
	}
	target := []string{"--target", "http://127.0.0.1:8080", "--api-key", "k"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--role-env", "DISPATCH_RETENTION=3m"}, "--role-env needs --processes"},
		{[]string{"--workers", "2", "--role-env", "DISPATCH_RETENTION=3m"}, "--role-env needs --processes"},
		{[]string{"--processes", "--role-env", "DISPATCH_RETENTION"}, `--role-env must be KEY=VALUE, got "DISPATCH_RETENTION" (no '=')`},
		{[]string{"--processes", "--role-env", "=3m"}, `--role-env must be KEY=VALUE, got "=3m" (empty KEY)`},
		{[]string{"--processes", "--role-env", "1X=3m"}, `--role-env KEY must be letters, digits and _ not starting with a digit, got "1X"`},
		{[]string{"--processes", "--role-env", "DISPATCH-RETENTION=3m"}, `got "DISPATCH-RETENTION"`},
		{append(slices.Clone(target), "--role-env", "A=b"), "--role-env is for the roles the tool starts"},
		{append(slices.Clone(target), "--sample-every", "1m"), "--sample-every reads the run's own database"},
		{[]string{"--sample-every", "500ms"}, "--sample-every must be 0 (off) or at least 1s, got 500ms"},
		{[]string{"--sample-every", "-1m"}, "--sample-every must be 0 (off) or at least 1s, got -1m0s"},
	} {
		_, _, err := parseRun(tc.args, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseRun(%q) = %v, want an error saying %q", tc.args, err, tc.want)
		}
	}
}

// The role processes get --role-env last, so it overrides the tool's own
// settings and the caller's environment.
func TestRoleEnvOverridesTheToolsSettings(t *testing.T) {
	t.Setenv("DISPATCH_RETENTION", "9h") // the caller's DISPATCH_* never reach a role
	env := processEnv([]string{"DISPATCH_LOG_LEVEL=error"}, []string{"DISPATCH_LOG_LEVEL=debug", "DISPATCH_RETENTION=3m"})
	cmd := exec.Command("/bin/sh", "-c", `printf '%s %s' "$DISPATCH_LOG_LEVEL" "$DISPATCH_RETENTION"`)
	cmd.Env = env
	out, err := cmd.Output()
	if err != nil || string(out) != "debug 3m" {
		t.Errorf("the role sees %q (%v), want \"debug 3m\"", out, err)
	}
}

// TestTableSizesOfPlainPartitionedAndMissingTables sizes, in a database of
// its own, a plain table, a partitioned one with two partitions, a
// partitioned one with none and one that does not exist.
func TestTableSizesOfPlainPartitionedAndMissingTables(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d := &deployment{} // for its database: created here, dropped at the end
	dsn, err := d.createDatabase(ctx, serverURL(), "loadtest_"+randomHex(6))
	t.Cleanup(func() {
		if d.database != "" {
			if _, err := d.admin.Exec(context.Background(), "DROP DATABASE "+pgx.Identifier{d.database}.Sanitize()+" WITH (FORCE)"); err != nil {
				t.Errorf("drop database %s: %v", d.database, err)
			}
		}
		if d.admin != nil {
			_ = d.admin.Close(context.Background())
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	if _, err := conn.Exec(ctx, `
		CREATE TABLE plain (id bigint PRIMARY KEY, pad text);
		INSERT INTO plain SELECT g, repeat('x', 200) FROM generate_series(1, 3000) AS g;
		CREATE TABLE parted (id bigint, at date, pad text, PRIMARY KEY (id, at)) PARTITION BY RANGE (at);
		CREATE TABLE parted_1 PARTITION OF parted FOR VALUES FROM ('2026-01-01') TO ('2026-02-01');
		CREATE TABLE parted_2 PARTITION OF parted FOR VALUES FROM ('2026-02-01') TO ('2026-03-01');
		INSERT INTO parted SELECT g, DATE '2026-01-01' + (g % 50), repeat('y', 200) FROM generate_series(1, 2000) AS g;
		CREATE TABLE empty_parted (id bigint, at date) PARTITION BY RANGE (at);
		SELECT pg_stat_force_next_flush();`); err != nil {
		t.Fatal(err)
	}
	var want struct{ plain, parted int64 }
	if err := conn.QueryRow(ctx, `SELECT pg_total_relation_size('plain'),
		pg_total_relation_size('parted_1') + pg_total_relation_size('parted_2')`).Scan(&want.plain, &want.parted); err != nil {
		t.Fatal(err)
	}
	if want.plain < 500_000 || want.parted < 300_000 {
		t.Fatalf("tables of %d and %d bytes: the test data is smaller than it should be", want.plain, want.parted)
	}

	got, err := tableSizes(ctx, conn, []string{"plain", "parted", "empty_parted", "missing"})
	if err != nil {
		t.Fatal(err)
	}
	wantSizes := []TableSize{
		{Name: "plain", Bytes: want.plain, Rows: 3000, Partitions: 1},
		{Name: "parted", Bytes: want.parted, Rows: 2000, Partitions: 2},
		{Name: "empty_parted", Bytes: 0, Rows: 0, Partitions: 0},
		{Name: "missing", Bytes: 0, Rows: 0, Partitions: 0},
	}
	if !slices.Equal(got, wantSizes) {
		t.Errorf("tableSizes = %+v\nwant %+v", got, wantSizes)
	}

	// Dropping a partition, as retention does, takes its bytes and rows.
	if _, err := conn.Exec(ctx, `DROP TABLE parted_1; SELECT pg_stat_force_next_flush();`); err != nil {
		t.Fatal(err)
	}
	got, err = tableSizes(ctx, conn, []string{"parted"})
	if err != nil {
		t.Fatal(err)
	}
	var left int64
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM parted`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Partitions != 1 || got[0].Rows != left || got[0].Bytes >= want.parted || got[0].Bytes == 0 {
		t.Errorf("after dropping a partition: %+v, want 1 partition of %d rows and fewer than %d bytes", got, left, want.parted)
	}

	// A query that fails names the table.
	_ = conn.Close(ctx)
	if _, err := tableSizes(ctx, conn, []string{"plain"}); err == nil || !strings.Contains(err.Error(), "size table plain") {
		t.Errorf("tableSizes on a closed connection: %v, want an error naming the table", err)
	}
}

// The sampler takes a sample every interval with the latency of the
// interval's deliveries, keeps sampling when a probe fails, and keeps the
// failure in the sample.
func TestSamplerRecordsEachIntervalAndProbeErrors(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.SampleEvery = time.Second
	accepted := newAcceptedLog()
	rcv, err := NewReceiver(1, cfg, accepted)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rcv.Close(context.Background()) }()
	now := time.Now()
	accepted.add("evt_before", now.Add(-time.Second))
	rcv.record(arrival{eventID: "evt_before", at: now, ok: true}) // before sampling starts: not counted

	probed := make(chan int)
	calls := 0
	probe := func(ctx context.Context) ([]TableSize, []ProcessRSS, error) {
		calls++
		probed <- calls
		if calls == 1 {
			return []TableSize{{Name: "events", Bytes: 1 << 20, Rows: 10, Partitions: 3}}, []ProcessRSS{{Name: "worker 1", PID: 1, RSSBytes: 30 << 20}}, nil
		}
		return nil, []ProcessRSS{{Name: "worker 1", PID: 1, RSSBytes: 31 << 20}}, errors.New("size table events: boom")
	}
	s := startSampling(context.Background(), 20*time.Millisecond, now, rcv, probe)
	for i, id := range []string{"evt_1", "evt_2"} {
		accepted.add(id, time.Now())
		rcv.record(arrival{eventID: id, at: time.Now().Add(time.Duration(i+1) * 10 * time.Millisecond), ok: true})
	}
	<-probed
	<-probed
	go func() { // a third tick may come before stop is seen
		for range probed {
		}
	}()
	samples := s.stop()
	close(probed)
	if len(samples) < 2 {
		t.Fatalf("%d samples, want at least 2", len(samples))
	}
	first, second := samples[0], samples[1]
	if first.Error != "" || len(first.Tables) != 1 || first.RSS[0].RSSBytes != 30<<20 {
		t.Errorf("first sample = %+v, want the table and the RSS", first)
	}
	if second.Error != "size table events: boom" || second.RSS[0].RSSBytes != 31<<20 || second.ElapsedSeconds < first.ElapsedSeconds {
		t.Errorf("second sample = %+v, want the probe's error and the RSS read", second)
	}
	received, maxMs := 0, 0.0
	for _, s := range samples {
		received += s.Latency.Count
		maxMs = max(maxMs, s.Latency.MaxMs)
	}
	if received != 2 || maxMs < 20 {
		t.Errorf("samples hold %d deliveries, the slowest %g ms; want the two since sampling started, one ≥ 20 ms", received, maxMs)
	}

	var md bytes.Buffer
	r := &Report{Samples: []SoakSample{{ElapsedSeconds: 60, Tables: first.Tables, RSS: first.RSS, Latency: Summarise([]time.Duration{time.Millisecond, 3 * time.Millisecond})}, second}}
	if err := r.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| elapsed | events MiB / rows / partitions | deliveries MiB / rows / partitions |",
		"| RSS worker 1 MiB | received | accepted→received p50 / p99 / max ms |",
		"| 1m0s | 1.0 / 10 / 3 | – | – | – | 30.0 | 2 | 1.00 / 3.00 / 3.00 |",
		": size table events: boom",
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("Markdown lacks %q:\n%s", want, md.String())
		}
	}
}

// Without sampling the receiver keeps no latencies for it.
func TestReceiverKeepsSampledLatenciesOnlyWhenSampling(t *testing.T) {
	t.Parallel()
	accepted := newAcceptedLog()
	rcv, err := NewReceiver(1, DefaultConfig(), accepted)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rcv.Close(context.Background()) }()
	accepted.add("evt_1", time.Now())
	rcv.record(arrival{eventID: "evt_1", at: time.Now(), ok: true})
	if s := rcv.takeSampled(); s != nil || len(rcv.takeWindow()) != 1 {
		t.Errorf("sampled latencies %v without --sample-every, want none (and the progress window kept)", s)
	}
}

func TestRunDatabaseConnectionFailureNamesTheDatabase(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d := &deployment{dsn: "postgres://postgres@127.0.0.1:1/loadtest_x?pool_max_conns=4", database: "loadtest_x"}
	if _, err := d.connect(ctx); err == nil || !strings.Contains(err.Error(), "connect to the run's database loadtest_x") {
		t.Errorf("connect to a closed port: %v, want it to name the database", err)
	}
	d.dsn = "postgres://%zz"
	if _, err := d.connect(ctx); err == nil || !strings.Contains(err.Error(), "the run's database URL") {
		t.Errorf("connect with an unparsable URL: %v", err)
	}
}

func TestParseVmRSS(t *testing.T) {
	t.Parallel()
	status := "Name:\tdispatch\nVmHWM:\t   51200 kB\nVmRSS:\t   40000 kB\n"
	if got, err := parseStatusKB([]byte(status), "VmRSS"); err != nil || got != 40000<<10 {
		t.Errorf("VmRSS = %d, %v; want %d", got, err, 40000<<10)
	}
	if _, err := parseStatusKB([]byte("VmRSS:\t12 MB\n"), "VmRSS"); err == nil || !strings.Contains(err.Error(), "unexpected VmRSS line") {
		t.Errorf("VmRSS in MB: %v, want refused", err)
	}
	if self, err := CurrentRSS(1 << 30); err == nil {
		t.Errorf("CurrentRSS of no process = %d, want an error", self)
	}
}

// With samples the plot gets a third panel of table sizes and RSS.
func TestPlotHasASoakPanelWithSamples(t *testing.T) {
	t.Parallel()
	r := &Report{Timeline: []Second{{T: 0, Accepted: 10}, {T: 1, Accepted: 12}}}
	height := func() int {
		var buf bytes.Buffer
		if err := r.WritePNG(&buf); err != nil {
			t.Fatal(err)
		}
		cfg, err := png.DecodeConfig(&buf)
		if err != nil {
			t.Fatal(err)
		}
		return cfg.Height
	}
	without := height()
	r.Samples = []SoakSample{
		{ElapsedSeconds: 1, Tables: []TableSize{{Name: "events", Bytes: 1 << 20}}, RSS: []ProcessRSS{{Name: "worker 1", RSSBytes: 30 << 20}}},
		{ElapsedSeconds: 2, Tables: []TableSize{{Name: "events", Bytes: 2 << 20}}, RSS: []ProcessRSS{{Name: "worker 1", RSSBytes: 31 << 20}}},
	}
	if with := height(); with*2 != without*3 {
		t.Errorf("plot height %d with samples, %d without; want three panels instead of two", with, without)
	}
}
