package domain

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// RetryStrategy says how a retry policy spaces its attempts.
type RetryStrategy string

// Retry strategies (SPEC §7 retry_policy.strategy).
const (
	// StrategyExponential waits InitialInterval × Multiplier^(n-1) after
	// the n-th failed attempt, capped at MaxInterval, with jitter.
	StrategyExponential RetryStrategy = "exponential"
	// StrategySchedule waits Schedule[n-1] after the n-th failed attempt.
	StrategySchedule RetryStrategy = "schedule"
)

// Retry policy limits. They keep a policy's total span finite and bounded
// (at most 100 attempts, each at most a week apart), which bounds how long
// a delivery can occupy storage.
const (
	MinRetryInterval       = time.Millisecond
	MaxInitialInterval     = 24 * time.Hour
	MaxRetryInterval       = 7 * 24 * time.Hour
	MinRetryMultiplier     = 1.0
	MaxRetryMultiplier     = 10.0
	MaxRetryJitter         = 1.0
	MaxRetryAttempts       = 100
	MaxRetryScheduleLength = 100
)

// Defaults of the exponential strategy (SPEC §3).
const (
	DefaultInitialInterval = time.Second
	DefaultMultiplier      = 2.0
	DefaultMaxInterval     = time.Hour
	DefaultJitter          = 0.1
	DefaultMaxAttempts     = 5
)

// RetryPolicy decides when a failed delivery is tried again and when it
// is given up (dead-lettered). MaxAttempts counts the first attempt.
// Exponential fields apply only to StrategyExponential, Schedule only to
// StrategySchedule; Validate refuses a mix, so a typo does not silently
// change which one is in force.
type RetryPolicy struct {
	Strategy        RetryStrategy
	InitialInterval time.Duration
	Multiplier      float64
	MaxInterval     time.Duration
	// Jitter spreads each delay over ±Jitter of itself (0..1), so the
	// retries of deliveries that failed together do not hit a recovering
	// endpoint together.
	Jitter      float64
	MaxAttempts int
	// Schedule lists the delays before attempts 2, 3, …
	Schedule []time.Duration
}

// DefaultRetryPolicy is SPEC §3's default: exponential from 1 s doubling
// up to 1 h, ±10 % jitter, 5 attempts.
func DefaultRetryPolicy() RetryPolicy {
	return RetryPolicy{
		Strategy:        StrategyExponential,
		InitialInterval: DefaultInitialInterval,
		Multiplier:      DefaultMultiplier,
		MaxInterval:     DefaultMaxInterval,
		Jitter:          DefaultJitter,
		MaxAttempts:     DefaultMaxAttempts,
	}
}

// strategy is the strategy in force: an unset Strategy means a schedule
// when one is given, exponential otherwise.
func (p RetryPolicy) strategy() RetryStrategy {
	if p.Strategy == "" {
		if len(p.Schedule) > 0 {
			return StrategySchedule
		}
		return StrategyExponential
	}
	return p.Strategy
}

// withDefaults fills the zero fields of a policy supplied by a user with the
// defaults of its strategy. Because zero means "unset", a Jitter of 0 becomes
// DefaultJitter: a policy can lower jitter (0.001) but not turn it off,
// which is the point of jitter. A MaxInterval left unset is at least
// InitialInterval, so a slow start alone is a valid policy.
func (p RetryPolicy) withDefaults() RetryPolicy {
	p.Strategy = p.strategy()
	switch p.Strategy {
	case StrategyExponential:
		if p.InitialInterval == 0 {
			p.InitialInterval = DefaultInitialInterval
		}
		if p.Multiplier == 0 {
			p.Multiplier = DefaultMultiplier
		}
		if p.MaxInterval == 0 {
			p.MaxInterval = max(DefaultMaxInterval, p.InitialInterval)
		}
		if p.Jitter == 0 {
			p.Jitter = DefaultJitter
		}
		if p.MaxAttempts == 0 {
			p.MaxAttempts = DefaultMaxAttempts
		}
	case StrategySchedule:
		if p.MaxAttempts == 0 {
			p.MaxAttempts = len(p.Schedule) + 1
		}
	}
	return p
}

// Validate checks p against the limits above. The error is a
// *ValidationError whose Field is "retry_policy.<json field>".
func (p RetryPolicy) Validate() error {
	switch p.Strategy {
	case StrategyExponential:
		return p.validateExponential()
	case StrategySchedule:
		return p.validateSchedule()
	}
	return invalid("retry_policy.strategy", "must be %q or %q, got %q", StrategyExponential, StrategySchedule, p.Strategy)
}

func (p RetryPolicy) validateExponential() error {
	if p.InitialInterval < MinRetryInterval || p.InitialInterval > MaxInitialInterval {
		return invalid("retry_policy.initial_interval", "must be between %s and %s, got %s",
			formatDuration(MinRetryInterval), formatDuration(MaxInitialInterval), formatDuration(p.InitialInterval))
	}
	// Written as !(in range) so NaN is refused too.
	if !(p.Multiplier >= MinRetryMultiplier && p.Multiplier <= MaxRetryMultiplier) {
		return invalid("retry_policy.multiplier", "must be between %g and %g, got %g", MinRetryMultiplier, MaxRetryMultiplier, p.Multiplier)
	}
	if p.MaxInterval < p.InitialInterval || p.MaxInterval > MaxRetryInterval {
		return invalid("retry_policy.max_interval", "must be between initial_interval (%s) and %s, got %s",
			formatDuration(p.InitialInterval), formatDuration(MaxRetryInterval), formatDuration(p.MaxInterval))
	}
	if !(p.Jitter >= 0 && p.Jitter <= MaxRetryJitter) {
		return invalid("retry_policy.jitter", "must be between 0 and %g, got %g", MaxRetryJitter, p.Jitter)
	}
	if p.MaxAttempts < 1 || p.MaxAttempts > MaxRetryAttempts {
		return invalid("retry_policy.max_attempts", "must be 1..%d, got %d", MaxRetryAttempts, p.MaxAttempts)
	}
	if len(p.Schedule) > 0 {
		return invalid("retry_policy.schedule", "applies only to strategy %q, not %q", StrategySchedule, StrategyExponential)
	}
	return nil
}

func (p RetryPolicy) validateSchedule() error {
	if len(p.Schedule) == 0 || len(p.Schedule) > MaxRetryScheduleLength {
		return invalid("retry_policy.schedule", "must list 1..%d delays, got %d", MaxRetryScheduleLength, len(p.Schedule))
	}
	for i, d := range p.Schedule {
		if d < MinRetryInterval || d > MaxRetryInterval {
			return invalid(fmt.Sprintf("retry_policy.schedule[%d]", i), "must be between %s and %s, got %s",
				formatDuration(MinRetryInterval), formatDuration(MaxRetryInterval), formatDuration(d))
		}
	}
	if p.MaxAttempts < 1 || p.MaxAttempts > len(p.Schedule)+1 {
		return invalid("retry_policy.max_attempts", "must be 1..%d (the first attempt plus one per schedule entry), got %d",
			len(p.Schedule)+1, p.MaxAttempts)
	}
	for _, f := range [...]struct {
		name string
		set  bool
	}{
		{"initial_interval", p.InitialInterval != 0},
		{"multiplier", p.Multiplier != 0},
		{"max_interval", p.MaxInterval != 0},
		{"jitter", p.Jitter != 0},
	} {
		if f.set {
			return invalid("retry_policy."+f.name, "applies only to strategy %q, not %q", StrategyExponential, StrategySchedule)
		}
	}
	return nil
}

// NextDelay returns how long to wait after attempt number attempt
// (1-based) failed, or false when it was the last (attempt >= MaxAttempts):
// the delivery is then dead.
//
// Exponential: base = min(InitialInterval × Multiplier^(attempt-1),
// MaxInterval), and the delay is drawn uniformly from
// [base×(1-Jitter), min(base×(1+Jitter), MaxInterval)) using rnd (a value in
// [0,1), math/rand/v2.Float64 in production; nil means no jitter). So
// MaxInterval is a hard ceiling, and delays at the ceiling still spread over
// the Jitter below it instead of piling up on it.
//
// Schedule: Schedule[attempt-1]; a schedule shorter than MaxAttempts-1 (which
// Validate refuses) repeats its last entry.
//
// A retryAfter longer than the computed delay replaces it, capped at the
// policy's largest interval (MaxInterval, or the largest schedule entry), so
// an endpoint can slow Dispatch down but not park a delivery for a year.
//
// NextDelay is total: on policies Validate would refuse it still returns a
// non-negative delay (an attempt < 1 counts as 1) and never panics.
func (p RetryPolicy) NextDelay(attempt int, retryAfter time.Duration, rnd func() float64) (time.Duration, bool) {
	if attempt >= p.MaxAttempts {
		return 0, false
	}
	attempt = max(attempt, 1)
	var delay, ceiling time.Duration
	if p.strategy() == StrategySchedule {
		if len(p.Schedule) == 0 {
			return 0, false
		}
		delay = p.Schedule[min(attempt, len(p.Schedule))-1]
		ceiling = maxDuration(p.Schedule)
	} else {
		delay, ceiling = p.exponentialDelay(attempt, rnd), p.MaxInterval
	}
	if retryAfter > delay {
		delay = max(delay, min(retryAfter, ceiling))
	}
	return max(delay, 0), true
}

func (p RetryPolicy) exponentialDelay(attempt int, rnd func() float64) time.Duration {
	ceiling := float64(p.MaxInterval)
	base := float64(p.InitialInterval) * math.Pow(p.Multiplier, float64(attempt-1))
	// Also catches +Inf and NaN, before converting back to an integer.
	if !(base < ceiling) {
		base = ceiling
	}
	jitter := p.Jitter
	if rnd == nil || !(jitter > 0) {
		return floatDuration(base)
	}
	r := rnd()
	if !(r >= 0) { // NaN or negative from a broken source
		r = 0
	}
	r = min(r, 1)
	lo := base * (1 - jitter)
	hi := min(base*(1+jitter), ceiling)
	return floatDuration(lo + (hi-lo)*r)
}

// floatDuration converts nanoseconds to a Duration, clamped to
// [0, math.MaxInt64]: converting a float64 at or above 2^63 to an integer
// is implementation-defined in Go.
func floatDuration(ns float64) time.Duration {
	switch {
	case ns >= math.MaxInt64: // the constant rounds to 2^63 as a float64
		return math.MaxInt64
	case ns > 0:
		return time.Duration(ns)
	}
	return 0
}

func maxDuration(ds []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}

// ParseDurationField parses a duration supplied by a user for field (its
// JSON name, used in the error): Go duration syntax with a unit ("1.5s",
// "5m", "2h30m"), positive. Signs, a bare "0" and surrounding spaces are
// refused rather than guessed at. The error is a *ValidationError.
func ParseDurationField(field, s string) (time.Duration, error) {
	if s == "" {
		return 0, invalid(field, "must be a duration such as \"1.5s\" or \"5m\", got an empty string")
	}
	if s[0] == '+' || s[0] == '-' {
		return 0, invalid(field, "must be a positive duration without a sign, got %q", s)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, invalid(field, "must be a duration such as \"1.5s\" or \"5m\", got %q", s)
	}
	if d <= 0 {
		return 0, invalid(field, "must be positive, got %q", s)
	}
	return d, nil
}

// formatDuration prints d without trailing zero units ("24h", not
// "24h0m0s"), as a user would write it.
func formatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}
