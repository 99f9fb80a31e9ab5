package loadtest

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// SoakTables are the tables a sample sizes: those retention drops
// partitions of, and the idempotency keys beside them.
var SoakTables = []string{"events", "deliveries", "attempts", "idempotency_keys"}

// SoakSample is what a run with Config.SampleEvery saw at one moment: how
// large the tables were, how much memory each Dispatch process held, and
// how fast the deliveries of the interval before it arrived.
type SoakSample struct {
	// ElapsedSeconds is from the first publish to the sample.
	ElapsedSeconds float64      `json:"elapsed_seconds"`
	Tables         []TableSize  `json:"tables"`
	RSS            []ProcessRSS `json:"rss"`
	// Latency is accepted→received of the deliveries first received in
	// the interval that ends at this sample.
	Latency Latency `json:"latency"`
	// Error says what could not be read; the rest of the sample stands.
	Error string `json:"error,omitempty"`
}

// TableSize is one table, partitions included.
type TableSize struct {
	Name string `json:"name"`
	// Bytes is pg_total_relation_size (indexes and TOAST included) summed
	// over the table and its partitions; 0 for a table that does not exist.
	Bytes int64 `json:"bytes"`
	// Rows is the statistics' estimate of live rows (n_live_tup) summed
	// over the partitions: cheap, and close, but not a count.
	Rows int64 `json:"rows"`
	// Partitions is how many leaf partitions the table has; 1 for a plain
	// table, 0 for one that does not exist.
	Partitions int `json:"partitions"`
}

// ProcessRSS is one Dispatch process's resident memory at a sample.
type ProcessRSS struct {
	Name     string `json:"name"`
	PID      int    `json:"pid"`
	RSSBytes int64  `json:"rss_bytes"`
}

// tableSizeQuery sizes one table and its partitions. pg_partition_tree
// lists a partitioned table's tree but nothing for a plain table, which
// therefore stands for itself; a missing table gives zeros.
const tableSizeQuery = `WITH r AS (SELECT to_regclass($1) AS oid),
tree AS (
  SELECT t.relid, t.isleaf FROM r, pg_partition_tree(r.oid) AS t
  UNION ALL
  SELECT c.oid, true FROM r JOIN pg_class AS c ON c.oid = r.oid WHERE c.relkind <> 'p' AND NOT c.relispartition
)
SELECT coalesce(sum(pg_total_relation_size(tree.relid)), 0)::bigint,
       coalesce(sum(s.n_live_tup) FILTER (WHERE tree.isleaf), 0)::bigint,
       count(*) FILTER (WHERE tree.isleaf)
  FROM tree LEFT JOIN pg_stat_user_tables AS s ON s.relid = tree.relid`

// tableSizes sizes each of tables in the database conn is connected to.
func tableSizes(ctx context.Context, conn *pgx.Conn, tables []string) ([]TableSize, error) {
	out := make([]TableSize, 0, len(tables))
	for _, name := range tables {
		ts := TableSize{Name: name}
		if err := conn.QueryRow(ctx, tableSizeQuery, name).Scan(&ts.Bytes, &ts.Rows, &ts.Partitions); err != nil {
			return out, fmt.Errorf("size table %s: %w", name, err)
		}
		out = append(out, ts)
	}
	return out, nil
}

// probeFunc reads the tables and the processes for one sample.
type probeFunc func(ctx context.Context) ([]TableSize, []ProcessRSS, error)

// sampler takes a SoakSample every interval until stopped.
type sampler struct {
	stopOnce sync.Once
	stopCh   chan struct{}
	done     chan struct{}
	samples  []SoakSample
}

// startSampling samples every interval from started on, with probe for
// the tables and processes and rcv for the deliveries' latency.
func startSampling(ctx context.Context, every time.Duration, started time.Time, rcv *Receiver, probe probeFunc) *sampler {
	s := &sampler{stopCh: make(chan struct{}), done: make(chan struct{})}
	rcv.takeSampled() // the interval starts now
	go func() {
		defer close(s.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-s.stopCh:
				return
			case <-tick.C:
			}
			s.samples = append(s.samples, takeSoakSample(ctx, every, started, rcv, probe))
		}
	}()
	return s
}

// stop ends the sampling and returns the samples taken.
func (s *sampler) stop() []SoakSample {
	s.stopOnce.Do(func() { close(s.stopCh) })
	<-s.done
	return s.samples
}

func takeSoakSample(ctx context.Context, every time.Duration, started time.Time, rcv *Receiver, probe probeFunc) SoakSample {
	at := time.Now()
	sample := SoakSample{
		ElapsedSeconds: math.Round(at.Sub(started).Seconds()*10) / 10,
		Latency:        Summarise(rcv.takeSampled()),
	}
	probeCtx, cancel := context.WithTimeout(ctx, min(every, 30*time.Second))
	defer cancel()
	tables, rss, err := probe(probeCtx)
	sample.Tables, sample.RSS = tables, rss
	if err != nil {
		sample.Error = err.Error()
	}
	return sample
}

// writeSamplesMarkdown writes one table row per sample: each table's size,
// rows and partitions, each process's RSS, and the interval's delivery
// latency.
func writeSamplesMarkdown(b *strings.Builder, samples []SoakSample) {
	if len(samples) == 0 {
		return
	}
	b.WriteString("\n| elapsed |")
	for _, t := range SoakTables {
		fmt.Fprintf(b, " %s MiB / rows / partitions |", t)
	}
	var procs []string
	for _, p := range samples[0].RSS {
		procs = append(procs, p.Name)
		fmt.Fprintf(b, " RSS %s MiB |", p.Name)
	}
	b.WriteString(" received | accepted→received p50 / p99 / max ms |\n|---:|")
	b.WriteString(strings.Repeat("---:|", len(SoakTables)+len(procs)+2))
	b.WriteString("\n")
	for _, s := range samples {
		fmt.Fprintf(b, "| %s |", time.Duration(s.ElapsedSeconds*float64(time.Second)).Round(time.Second))
		for _, name := range SoakTables {
			cell := "–"
			for _, t := range s.Tables {
				if t.Name == name {
					cell = fmt.Sprintf("%s / %s / %d", mib(t.Bytes), thousands(t.Rows), t.Partitions)
				}
			}
			fmt.Fprintf(b, " %s |", cell)
		}
		for _, name := range procs {
			cell := "–"
			for _, p := range s.RSS {
				if p.Name == name && p.RSSBytes > 0 {
					cell = mib(p.RSSBytes)
				}
			}
			fmt.Fprintf(b, " %s |", cell)
		}
		lat := "–"
		if s.Latency.Count > 0 {
			lat = msText(s.Latency.P50Ms) + " / " + msText(s.Latency.P99Ms) + " / " + msText(s.Latency.MaxMs)
		}
		fmt.Fprintf(b, " %s | %s |\n", thousands(int64(s.Latency.Count)), lat)
	}
	for _, s := range samples {
		if s.Error != "" {
			fmt.Fprintf(b, "\n- sample at %gs: %s", s.ElapsedSeconds, s.Error)
		}
	}
}

func mib(bytes int64) string { return fmt.Sprintf("%.1f", float64(bytes)/(1<<20)) }
