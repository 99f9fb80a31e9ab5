package domain

import "time"

// The circuit breaker (SPEC §3) stops a failing endpoint from tying up
// workers: after FailureThreshold consecutive failures it opens for
// OpenDuration, deliveries are postponed without consuming an attempt, then
// HalfOpenProbes probes test the endpoint. A success closes it; a failure
// reopens it. The state is a plain value so every worker can share it
// through a store (Redis), which applies Allow and Record atomically.

// Breaker defaults (SPEC §7, DISPATCH_BREAKER_*).
const (
	DefaultBreakerFailureThreshold = 5
	DefaultBreakerOpenDuration     = 30 * time.Second
	DefaultBreakerHalfOpenProbes   = 3
)

// Breaker configuration limits.
const (
	MaxBreakerFailureThreshold = 1000
	MinBreakerOpenDuration     = time.Millisecond
	MaxBreakerOpenDuration     = 24 * time.Hour
	MaxBreakerHalfOpenProbes   = 100
)

// minProbeRetryDelay is the least a delivery denied by a busy half-open
// breaker waits; see BreakerConfig.ProbeRetryDelay.
const minProbeRetryDelay = 100 * time.Millisecond

// BreakerConfig tunes every subscription's breaker.
type BreakerConfig struct {
	// FailureThreshold is how many consecutive failures open the circuit.
	FailureThreshold int
	// OpenDuration is how long the circuit stays open before probing.
	OpenDuration time.Duration
	// HalfOpenProbes is how many deliveries may test a half-open circuit.
	HalfOpenProbes int
}

// DefaultBreakerConfig returns SPEC §3's breaker: 5 failures, 30 s open,
// 3 probes.
func DefaultBreakerConfig() BreakerConfig {
	return BreakerConfig{
		FailureThreshold: DefaultBreakerFailureThreshold,
		OpenDuration:     DefaultBreakerOpenDuration,
		HalfOpenProbes:   DefaultBreakerHalfOpenProbes,
	}
}

// Validate checks c at startup. The error is a *ValidationError whose
// Field is "breaker.<setting>".
func (c BreakerConfig) Validate() error {
	if c.FailureThreshold < 1 || c.FailureThreshold > MaxBreakerFailureThreshold {
		return invalid("breaker.failure_threshold", "must be 1..%d, got %d", MaxBreakerFailureThreshold, c.FailureThreshold)
	}
	if c.OpenDuration < MinBreakerOpenDuration || c.OpenDuration > MaxBreakerOpenDuration {
		return invalid("breaker.open_duration", "must be between %s and %s, got %s",
			formatDuration(MinBreakerOpenDuration), formatDuration(MaxBreakerOpenDuration), formatDuration(c.OpenDuration))
	}
	if c.HalfOpenProbes < 1 || c.HalfOpenProbes > MaxBreakerHalfOpenProbes {
		return invalid("breaker.half_open_probes", "must be 1..%d, got %d", MaxBreakerHalfOpenProbes, c.HalfOpenProbes)
	}
	return nil
}

// ProbeRetryDelay is how long a delivery denied by a half-open breaker
// whose probes are all in flight waits: OpenDuration/10, at least 100 ms.
// The probes answer within a delivery timeout, so it checks back much
// sooner than a full OpenDuration, without spinning.
func (c BreakerConfig) ProbeRetryDelay() time.Duration {
	return max(c.OpenDuration/10, minProbeRetryDelay)
}

// BreakerPhase is where a breaker is in its cycle.
type BreakerPhase string

// Breaker phases, as persisted.
const (
	BreakerClosed   BreakerPhase = "closed"
	BreakerOpen     BreakerPhase = "open"
	BreakerHalfOpen BreakerPhase = "half_open"
)

// Breaker is one subscription's circuit state. Its fields are exported
// because an adapter persists them; the zero Breaker is closed, which is
// what a subscription without stored state has. An unknown Phase is read
// as closed too: a corrupted state must not stop deliveries for good.
type Breaker struct {
	Phase BreakerPhase
	// Failures counts consecutive failures while closed; it keeps the count
	// that opened the circuit while open.
	Failures int
	// OpenUntil is, while open, when probing may start. While half-open it
	// is when unanswered probes are presumed lost (their worker died) and a
	// new set may start, so a lost probe cannot wedge the circuit.
	OpenUntil time.Time
	// ProbesStarted counts the probes let through in the current half-open
	// window.
	ProbesStarted int
}

// Allow decides whether a delivery may be attempted at now, and returns the
// state to store. When it is not allowed, retryAt is when to try again (the
// delivery is postponed without consuming an attempt):
//
//   - closed: allowed.
//   - open before OpenUntil: denied until OpenUntil.
//   - open at or after OpenUntil: becomes half-open and this delivery is
//     the first probe.
//   - half-open: allowed while fewer than HalfOpenProbes probes have
//     started; then denied for cfg.ProbeRetryDelay(), unless the probe
//     window (OpenDuration) has passed with no verdict, which starts a new
//     window with this delivery as its first probe.
func (b Breaker) Allow(cfg BreakerConfig, now time.Time) (next Breaker, allowed bool, retryAt time.Time) {
	switch b.Phase {
	case BreakerOpen:
		if now.Before(b.OpenUntil) {
			return b, false, b.OpenUntil
		}
		return b.startProbing(cfg, now), true, time.Time{}
	case BreakerHalfOpen:
		if b.ProbesStarted < cfg.HalfOpenProbes {
			b.ProbesStarted++
			return b, true, time.Time{}
		}
		if !now.Before(b.OpenUntil) {
			return b.startProbing(cfg, now), true, time.Time{}
		}
		return b, false, now.Add(cfg.ProbeRetryDelay())
	}
	return b, true, time.Time{}
}

// startProbing opens a half-open window whose first probe is starting now.
func (b Breaker) startProbing(cfg BreakerConfig, now time.Time) Breaker {
	b.Phase = BreakerHalfOpen
	b.ProbesStarted = 1
	b.OpenUntil = now.Add(cfg.OpenDuration)
	return b
}

// Record folds an attempt's result into the state and returns the state to
// store. Only attempts count: postponements by the breaker itself, the rate
// limit or the semaphore are not results.
//
//   - closed: a success resets Failures; a failure counts, and the
//     FailureThreshold-th consecutive one opens the circuit until
//     now+OpenDuration.
//   - half-open: a success closes the circuit; a failure reopens it until
//     now+OpenDuration.
//   - open: the result is ignored. Allow lets nothing through while open,
//     so the result belongs to a request started before the circuit opened
//     and says nothing about the endpoint since: closing on a late success
//     would flap, and extending on late failures would let a backlog of
//     them keep the circuit open past its OpenDuration. Only probes decide.
//
// A result from before the circuit opened can also arrive while half-open;
// it is indistinguishable from a probe's and counts as one. That costs at
// most an early close or one more open period.
func (b Breaker) Record(cfg BreakerConfig, success bool, now time.Time) Breaker {
	switch b.Phase {
	case BreakerOpen:
		return b
	case BreakerHalfOpen:
		if success {
			return Breaker{Phase: BreakerClosed}
		}
		return b.open(cfg, now)
	}
	if success {
		return Breaker{Phase: BreakerClosed}
	}
	b.Phase = BreakerClosed
	b.Failures++
	if b.Failures >= cfg.FailureThreshold {
		return b.open(cfg, now)
	}
	return b
}

func (b Breaker) open(cfg BreakerConfig, now time.Time) Breaker {
	return Breaker{
		Phase:     BreakerOpen,
		Failures:  b.Failures,
		OpenUntil: now.Add(cfg.OpenDuration),
	}
}
