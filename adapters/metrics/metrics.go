// Package metrics exposes Dispatch's Prometheus metrics (SPEC §5). Labels are
// bounded: none grows with the number of subscriptions or events.
//
// Rule of dependency: metrics imports domain and prometheus; collectors are
// registered on an injected prometheus.Registerer, never the global one.
package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dispatch-webhooks/dispatch/domain"
)

// Metrics are the collectors the roles update.
type Metrics struct {
	eventsReceived  prometheus.Counter
	deliveries      *prometheus.CounterVec
	deliveryLatency prometheus.Histogram
	attemptDuration prometheus.Histogram
	enqueueDeferred prometheus.Counter
	fanOutHeld      prometheus.Counter
	fanOutFailures  prometheus.Counter
	schedulerSwept  *prometheus.CounterVec
	malformed       *prometheus.CounterVec
	postponed       *prometheus.CounterVec
	degraded        prometheus.Counter
	pending         prometheus.Gauge
	deadLetters     prometheus.Gauge
	streamLag       *prometheus.GaugeVec
	retainedRows    *prometheus.GaugeVec
	tableBytes      *prometheus.GaugeVec
	partitions      *prometheus.GaugeVec
	circuitsOpen    prometheus.Gauge

	mu sync.Mutex
	// openUntil tracks the circuits this process saw open, by
	// subscription, until they may close; it backs circuitsOpen.
	openUntil map[string]time.Time
}

// New creates the collectors and registers them on reg.
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		eventsReceived: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dispatch_events_received_total",
			Help: "Events accepted (committed) by the API, idempotent replays excluded.",
		}),
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dispatch_deliveries_total",
			Help: "Delivery attempts by outcome: delivered, retrying, dead.",
		}, []string{"outcome"}),
		deliveryLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "dispatch_delivery_latency_seconds",
			Help:    "Time from an event being accepted to a delivery of it succeeding.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 14),
		}),
		attemptDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "dispatch_attempt_duration_seconds",
			Help:    "Duration of one HTTP attempt against an endpoint.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 14),
		}),
		enqueueDeferred: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dispatch_enqueue_deferred_total",
			Help: "Committed work whose append to a stream failed; the scheduler enqueues it from PostgreSQL.",
		}),
		fanOutHeld: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dispatch_fanout_held_seconds_total",
			Help: "Time fan-out batches waited for the workers to read the delivery stream down to DISPATCH_FANOUT_MAX_UNREAD.",
		}),
		fanOutFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dispatch_fanout_failures_total",
			Help: "Events settled as failed because they could not be fanned out after their tries (the reason is the event's failure_reason).",
		}),
		schedulerSwept: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dispatch_scheduler_requeued_total",
			Help: "Work the scheduler re-enqueued, by kind: due_delivery, unfanned_event, reclaimed_event, reclaimed_delivery.",
		}, []string{"kind"}),
		malformed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dispatch_malformed_stream_entries_total",
			Help: "Stream entries that named no valid event or delivery; acknowledged and dropped.",
		}, []string{"stream"}),
		postponed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dispatch_deliveries_postponed_total",
			Help: "Deliveries postponed without an attempt, by reason: throttled, circuit_open.",
		}, []string{"reason"}),
		degraded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dispatch_protection_failures_total",
			Help: "Deliveries whose shared protection (Redis) failed: protected by the worker's local protection only.",
		}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "dispatch_pending_deliveries",
			Help: "Deliveries not yet delivered nor dead (pending, delivering, retrying); exported by the scheduler.",
		}),
		deadLetters: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "dispatch_dead_letters",
			Help: "Dead deliveries (the dead-letter queue); exported by the scheduler.",
		}),
		streamLag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "dispatch_stream_lag",
			Help: "Stream entries a consumer group has not finished (unread plus unacknowledged), by stream; exported by the scheduler.",
		}, []string{"stream"}),
		retainedRows: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "dispatch_retained_rows",
			Help: "Rows kept in each history table (events, deliveries, attempts), as PostgreSQL's statistics estimate them; exported by the scheduler.",
		}, []string{"table"}),
		tableBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "dispatch_table_bytes",
			Help: "Bytes each history table (events, deliveries, attempts) takes on disk with its indexes; exported by the scheduler.",
		}, []string{"table"}),
		partitions: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "dispatch_partitions",
			Help: "Partitions (time windows) of each history table (events, deliveries, attempts); exported by the scheduler.",
		}, []string{"table"}),
		circuitsOpen: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "dispatch_circuits_open",
			Help: "Subscriptions whose circuit this worker last saw open and whose open period has not ended.",
		}),
		openUntil: map[string]time.Time{},
	}
	for _, reason := range []string{domain.ReasonThrottled, domain.ReasonCircuitOpen} {
		m.postponed.WithLabelValues(reason)
	}
	for _, outcome := range []domain.DeliveryStatus{domain.DeliveryDelivered, domain.DeliveryRetrying, domain.DeliveryDead} {
		m.deliveries.WithLabelValues(string(outcome))
	}
	reg.MustRegister(m.eventsReceived, m.deliveries, m.deliveryLatency, m.attemptDuration, m.enqueueDeferred, m.fanOutHeld, m.fanOutFailures, m.schedulerSwept, m.malformed,
		m.postponed, m.degraded,
		m.pending, m.deadLetters, m.streamLag, m.retainedRows, m.tableBytes, m.partitions, m.circuitsOpen)
	return m
}

// EventReceived counts one accepted event.
func (m *Metrics) EventReceived() { m.eventsReceived.Inc() }

// EnqueueDeferred counts one failed append of committed work.
func (m *Metrics) EnqueueDeferred() { m.enqueueDeferred.Inc() }

// Attempted records one attempt that left the delivery in status, and the
// end-to-end latency when it was delivered.
func (m *Metrics) Attempted(status domain.DeliveryStatus, duration time.Duration, eventAccepted, now time.Time) {
	m.deliveries.WithLabelValues(string(status)).Inc()
	m.attemptDuration.Observe(duration.Seconds())
	if status == domain.DeliveryDelivered {
		m.deliveryLatency.Observe(now.Sub(eventAccepted).Seconds())
	}
}

// FanOutHeld adds the time one fan-out batch waited for the workers.
func (m *Metrics) FanOutHeld(d time.Duration) { m.fanOutHeld.Add(d.Seconds()) }

// FanOutFailed counts one event settled as failed because it could not be
// fanned out.
func (m *Metrics) FanOutFailed() { m.fanOutFailures.Inc() }

// Requeued counts n items the scheduler re-enqueued of one kind.
func (m *Metrics) Requeued(kind string, n int) {
	if n > 0 {
		m.schedulerSwept.WithLabelValues(kind).Add(float64(n))
	}
}

// Malformed counts one dropped stream entry of stream.
func (m *Metrics) Malformed(stream string) { m.malformed.WithLabelValues(stream).Inc() }

// Postponed counts one delivery postponed by a protection.
func (m *Metrics) Postponed(reason string) { m.postponed.WithLabelValues(reason).Inc() }

// ProtectionFailed counts one delivery whose shared protection failed.
func (m *Metrics) ProtectionFailed() { m.degraded.Inc() }

// Backlog sets the backlog gauges from counts by status.
func (m *Metrics) Backlog(counts map[domain.DeliveryStatus]int64) {
	m.pending.Set(float64(counts[domain.DeliveryPending] + counts[domain.DeliveryDelivering] + counts[domain.DeliveryRetrying]))
	m.deadLetters.Set(float64(counts[domain.DeliveryDead]))
}

// StreamLag sets one stream's lag.
func (m *Metrics) StreamLag(stream string, lag int64) {
	m.streamLag.WithLabelValues(stream).Set(float64(lag))
}

// TableUsage sets the storage gauges of one table.
func (m *Metrics) TableUsage(table string, rows, bytes int64) {
	m.retainedRows.WithLabelValues(table).Set(float64(rows))
	m.tableBytes.WithLabelValues(table).Set(float64(bytes))
}

// Partitions sets the partitions gauge of one table.
func (m *Metrics) Partitions(table string, n int) {
	m.partitions.WithLabelValues(table).Set(float64(n))
}

// Circuit records a breaker state this worker saw for a subscription.
// Subscription ids are kept only while their circuit is open, so memory
// stays bounded by the number of open circuits.
func (m *Metrics) Circuit(subscriptionID string, b domain.Breaker, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if b.Phase == domain.BreakerOpen && b.OpenUntil.After(now) {
		m.openUntil[subscriptionID] = b.OpenUntil
	} else {
		delete(m.openUntil, subscriptionID)
	}
	for id, until := range m.openUntil {
		if !until.After(now) {
			delete(m.openUntil, id)
		}
	}
	m.circuitsOpen.Set(float64(len(m.openUntil)))
}
