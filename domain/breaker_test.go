package domain_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/dispatch-webhooks/dispatch/domain"
)

var breakerNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func TestBreakerConfigValidate(t *testing.T) {
	t.Parallel()
	cfg := func(change func(*domain.BreakerConfig)) domain.BreakerConfig {
		c := domain.DefaultBreakerConfig()
		change(&c)
		return c
	}
	tests := []struct {
		name      string
		cfg       domain.BreakerConfig
		wantField string
		wantMsg   string
	}{
		{"default", domain.DefaultBreakerConfig(), "", ""},
		{"lowest bounds", domain.BreakerConfig{FailureThreshold: 1, OpenDuration: time.Millisecond, HalfOpenProbes: 1}, "", ""},
		{"highest bounds", domain.BreakerConfig{FailureThreshold: 1000, OpenDuration: 24 * time.Hour, HalfOpenProbes: 100}, "", ""},
		{"threshold zero", cfg(func(c *domain.BreakerConfig) { c.FailureThreshold = 0 }), "breaker.failure_threshold", "must be 1..1000, got 0"},
		{"threshold too high", cfg(func(c *domain.BreakerConfig) { c.FailureThreshold = 1001 }), "breaker.failure_threshold", "got 1001"},
		{"open duration zero", cfg(func(c *domain.BreakerConfig) { c.OpenDuration = 0 }), "breaker.open_duration", "must be between 1ms and 24h, got 0s"},
		{"open duration too long", cfg(func(c *domain.BreakerConfig) { c.OpenDuration = 25 * time.Hour }), "breaker.open_duration", "got 25h"},
		{"probes zero", cfg(func(c *domain.BreakerConfig) { c.HalfOpenProbes = 0 }), "breaker.half_open_probes", "must be 1..100, got 0"},
		{"probes too many", cfg(func(c *domain.BreakerConfig) { c.HalfOpenProbes = 101 }), "breaker.half_open_probes", "got 101"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			checkValidation(t, tt.cfg.Validate(), tt.wantField, tt.wantMsg)
		})
	}
	if d := domain.DefaultBreakerConfig(); d.FailureThreshold != 5 || d.OpenDuration != 30*time.Second || d.HalfOpenProbes != 3 {
		t.Errorf("DefaultBreakerConfig() = %+v, want SPEC's 5, 30s, 3", d)
	}
}

func TestBreakerProbeRetryDelay(t *testing.T) {
	t.Parallel()
	for open, want := range map[time.Duration]time.Duration{
		30 * time.Second: 3 * time.Second, time.Second: 100 * time.Millisecond,
		500 * time.Millisecond: 100 * time.Millisecond, time.Millisecond: 100 * time.Millisecond,
	} {
		if got := (domain.BreakerConfig{OpenDuration: open}).ProbeRetryDelay(); got != want {
			t.Errorf("ProbeRetryDelay with OpenDuration %s = %s, want %s", open, got, want)
		}
	}
}

func TestBreakerAllow(t *testing.T) {
	t.Parallel()
	cfg := domain.DefaultBreakerConfig()
	now := breakerNow
	later := now.Add(10 * time.Second)
	tests := []struct {
		name        string
		in          domain.Breaker
		want        domain.Breaker
		wantAllowed bool
		wantRetryAt time.Time
	}{
		{"zero is closed", domain.Breaker{}, domain.Breaker{}, true, time.Time{}},
		{"closed", domain.Breaker{Phase: domain.BreakerClosed, Failures: 4}, domain.Breaker{Phase: domain.BreakerClosed, Failures: 4}, true, time.Time{}},
		{"unknown phase reads as closed", domain.Breaker{Phase: "melted"}, domain.Breaker{Phase: "melted"}, true, time.Time{}},
		{"open denies until OpenUntil",
			domain.Breaker{Phase: domain.BreakerOpen, Failures: 5, OpenUntil: later},
			domain.Breaker{Phase: domain.BreakerOpen, Failures: 5, OpenUntil: later}, false, later},
		{"open one instant before OpenUntil",
			domain.Breaker{Phase: domain.BreakerOpen, Failures: 5, OpenUntil: now.Add(1)},
			domain.Breaker{Phase: domain.BreakerOpen, Failures: 5, OpenUntil: now.Add(1)}, false, now.Add(1)},
		{"open at OpenUntil lets the first probe through",
			domain.Breaker{Phase: domain.BreakerOpen, Failures: 5, OpenUntil: now},
			domain.Breaker{Phase: domain.BreakerHalfOpen, Failures: 5, OpenUntil: now.Add(30 * time.Second), ProbesStarted: 1}, true, time.Time{}},
		{"open long after OpenUntil",
			domain.Breaker{Phase: domain.BreakerOpen, Failures: 5, OpenUntil: now.Add(-time.Hour)},
			domain.Breaker{Phase: domain.BreakerHalfOpen, Failures: 5, OpenUntil: now.Add(30 * time.Second), ProbesStarted: 1}, true, time.Time{}},
		{"half-open second probe",
			domain.Breaker{Phase: domain.BreakerHalfOpen, OpenUntil: later, ProbesStarted: 1},
			domain.Breaker{Phase: domain.BreakerHalfOpen, OpenUntil: later, ProbesStarted: 2}, true, time.Time{}},
		{"half-open third probe",
			domain.Breaker{Phase: domain.BreakerHalfOpen, OpenUntil: later, ProbesStarted: 2},
			domain.Breaker{Phase: domain.BreakerHalfOpen, OpenUntil: later, ProbesStarted: 3}, true, time.Time{}},
		{"half-open with every probe in flight",
			domain.Breaker{Phase: domain.BreakerHalfOpen, OpenUntil: later, ProbesStarted: 3},
			domain.Breaker{Phase: domain.BreakerHalfOpen, OpenUntil: later, ProbesStarted: 3}, false, now.Add(3 * time.Second)},
		{"half-open whose probes were lost starts a new window",
			domain.Breaker{Phase: domain.BreakerHalfOpen, OpenUntil: now, ProbesStarted: 3},
			domain.Breaker{Phase: domain.BreakerHalfOpen, OpenUntil: now.Add(30 * time.Second), ProbesStarted: 1}, true, time.Time{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, allowed, retryAt := tt.in.Allow(cfg, now)
			if got != tt.want || allowed != tt.wantAllowed || !retryAt.Equal(tt.wantRetryAt) {
				t.Errorf("Allow(%+v) =\n %+v, %v, %s\nwant\n %+v, %v, %s", tt.in, got, allowed, retryAt, tt.want, tt.wantAllowed, tt.wantRetryAt)
			}
		})
	}
}

func TestBreakerRecord(t *testing.T) {
	t.Parallel()
	cfg := domain.DefaultBreakerConfig()
	now := breakerNow
	reopen := now.Add(30 * time.Second)
	closed := domain.Breaker{Phase: domain.BreakerClosed}
	tests := []struct {
		name    string
		cfg     domain.BreakerConfig
		in      domain.Breaker
		success bool
		want    domain.Breaker
	}{
		{"zero, success", cfg, domain.Breaker{}, true, closed},
		{"zero, failure counts", cfg, domain.Breaker{}, false, domain.Breaker{Phase: domain.BreakerClosed, Failures: 1}},
		{"closed, success resets the count", cfg, domain.Breaker{Phase: domain.BreakerClosed, Failures: 4}, true, closed},
		{"closed, failure below the threshold", cfg, domain.Breaker{Phase: domain.BreakerClosed, Failures: 3}, false,
			domain.Breaker{Phase: domain.BreakerClosed, Failures: 4}},
		{"closed, failure at the threshold opens", cfg, domain.Breaker{Phase: domain.BreakerClosed, Failures: 4}, false,
			domain.Breaker{Phase: domain.BreakerOpen, Failures: 5, OpenUntil: reopen}},
		{"threshold 1 opens on the first failure", domain.BreakerConfig{FailureThreshold: 1, OpenDuration: time.Minute, HalfOpenProbes: 1},
			domain.Breaker{}, false, domain.Breaker{Phase: domain.BreakerOpen, Failures: 1, OpenUntil: now.Add(time.Minute)}},
		{"unknown phase counts as closed", cfg, domain.Breaker{Phase: "melted", Failures: 1}, false,
			domain.Breaker{Phase: domain.BreakerClosed, Failures: 2}},
		{"half-open, success closes", cfg, domain.Breaker{Phase: domain.BreakerHalfOpen, Failures: 5, OpenUntil: now, ProbesStarted: 2}, true, closed},
		{"half-open, failure reopens", cfg, domain.Breaker{Phase: domain.BreakerHalfOpen, Failures: 5, OpenUntil: now, ProbesStarted: 2}, false,
			domain.Breaker{Phase: domain.BreakerOpen, Failures: 5, OpenUntil: reopen}},
		{"open, late success is ignored", cfg, domain.Breaker{Phase: domain.BreakerOpen, Failures: 5, OpenUntil: now.Add(time.Second)}, true,
			domain.Breaker{Phase: domain.BreakerOpen, Failures: 5, OpenUntil: now.Add(time.Second)}},
		{"open, late failure does not extend", cfg, domain.Breaker{Phase: domain.BreakerOpen, Failures: 5, OpenUntil: now.Add(time.Second)}, false,
			domain.Breaker{Phase: domain.BreakerOpen, Failures: 5, OpenUntil: now.Add(time.Second)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.in.Record(tt.cfg, tt.success, now); got != tt.want {
				t.Errorf("Record(%+v, success=%v) =\n %+v\nwant\n %+v", tt.in, tt.success, got, tt.want)
			}
		})
	}
}

// TestBreakerCycle walks SPEC §3's story with the default configuration.
func TestBreakerCycle(t *testing.T) {
	t.Parallel()
	cfg := domain.DefaultBreakerConfig()
	now := breakerNow
	var b domain.Breaker
	allow := func(wantAllowed bool) time.Time {
		t.Helper()
		var allowed bool
		var retryAt time.Time
		b, allowed, retryAt = b.Allow(cfg, now)
		if allowed != wantAllowed {
			t.Fatalf("at +%s in %+v: allowed = %v, want %v", now.Sub(breakerNow), b, allowed, wantAllowed)
		}
		return retryAt
	}

	for range 5 {
		allow(true)
		b = b.Record(cfg, false, now)
	}
	if b.Phase != domain.BreakerOpen {
		t.Fatalf("after 5 failures: %+v, want open", b)
	}
	if retryAt := allow(false); !retryAt.Equal(now.Add(30 * time.Second)) {
		t.Fatalf("retryAt = %s, want OpenUntil", retryAt)
	}

	now = now.Add(30 * time.Second)
	allow(true) // probe 1
	allow(true) // probe 2
	allow(true) // probe 3
	allow(false)
	b = b.Record(cfg, false, now) // a probe fails: open again
	if b.Phase != domain.BreakerOpen || !b.OpenUntil.Equal(now.Add(30*time.Second)) {
		t.Fatalf("after a failed probe: %+v, want open for 30s", b)
	}
	allow(false)

	now = now.Add(30 * time.Second)
	allow(true)
	b = b.Record(cfg, true, now)
	if b != (domain.Breaker{Phase: domain.BreakerClosed}) {
		t.Fatalf("after a successful probe: %+v, want closed and reset", b)
	}
	allow(true)
}

// TestBreakerInvariants drives a breaker with random results and times
// and checks what must hold whatever happens: nothing passes an open
// circuit before OpenUntil, no half-open window lets more than
// HalfOpenProbes through, and a denial always names a future retry time.
func TestBreakerInvariants(t *testing.T) {
	t.Parallel()
	for seed := range uint64(50) {
		rng := rand.New(rand.NewPCG(seed, 0))
		cfg := domain.BreakerConfig{FailureThreshold: 1 + rng.IntN(5), OpenDuration: time.Duration(1+rng.IntN(10)) * time.Second, HalfOpenProbes: 1 + rng.IntN(4)}
		now := breakerNow
		var b domain.Breaker
		probesInWindow := 0
		for step := range 2000 {
			now = now.Add(time.Duration(rng.IntN(1500)) * time.Millisecond)
			if rng.IntN(2) == 0 {
				before := b
				next, allowed, retryAt := b.Allow(cfg, now)
				if before.Phase == domain.BreakerOpen && now.Before(before.OpenUntil) && allowed {
					t.Fatalf("seed %d step %d: open breaker %+v allowed at %s", seed, step, before, now)
				}
				if !allowed && !retryAt.After(now) {
					t.Fatalf("seed %d step %d: denied with retryAt %s not after now %s", seed, step, retryAt, now)
				}
				if next.Phase == domain.BreakerHalfOpen && allowed {
					if next.ProbesStarted == 1 {
						probesInWindow = 0
					}
					probesInWindow++
					if probesInWindow > cfg.HalfOpenProbes {
						t.Fatalf("seed %d step %d: %d probes in one window, limit %d", seed, step, probesInWindow, cfg.HalfOpenProbes)
					}
				}
				b = next
			} else {
				b = b.Record(cfg, rng.IntN(3) == 0, now)
			}
			if b.Failures < 0 || b.ProbesStarted < 0 || b.ProbesStarted > cfg.HalfOpenProbes {
				t.Fatalf("seed %d step %d: counters out of range: %+v", seed, step, b)
			}
		}
	}
}
