package domain_test

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-webhooks/dispatch/domain"
)

const week = 7 * 24 * time.Hour

func TestDefaultRetryPolicy(t *testing.T) {
	t.Parallel()
	want := domain.RetryPolicy{
		Strategy: domain.StrategyExponential, InitialInterval: time.Second, Multiplier: 2,
		MaxInterval: time.Hour, Jitter: 0.1, MaxAttempts: 5,
	}
	p := domain.DefaultRetryPolicy()
	if !reflect.DeepEqual(p, want) {
		t.Fatalf("DefaultRetryPolicy() = %+v, want %+v", p, want)
	}
	if err := p.Validate(); err != nil {
		t.Fatalf("default policy invalid: %v", err)
	}
	if !reflect.DeepEqual(p.WithDefaults(), p) {
		t.Fatal("withDefaults changed the default policy")
	}
}

func TestRetryPolicyWithDefaults(t *testing.T) {
	t.Parallel()
	schedule := []time.Duration{time.Minute, 5 * time.Minute, 30 * time.Minute}
	tests := []struct {
		name string
		in   domain.RetryPolicy
		want domain.RetryPolicy
	}{
		{"zero is the default", domain.RetryPolicy{}, domain.DefaultRetryPolicy()},
		{"exponential fills every zero field", domain.RetryPolicy{Strategy: domain.StrategyExponential, MaxAttempts: 10},
			domain.RetryPolicy{Strategy: domain.StrategyExponential, InitialInterval: time.Second, Multiplier: 2, MaxInterval: time.Hour, Jitter: 0.1, MaxAttempts: 10}},
		{"set fields are kept", domain.RetryPolicy{InitialInterval: 5 * time.Second, Multiplier: 3, MaxInterval: 10 * time.Minute, Jitter: 0.5, MaxAttempts: 7},
			domain.RetryPolicy{Strategy: domain.StrategyExponential, InitialInterval: 5 * time.Second, Multiplier: 3, MaxInterval: 10 * time.Minute, Jitter: 0.5, MaxAttempts: 7}},
		{"max_interval follows a large initial_interval", domain.RetryPolicy{InitialInterval: 2 * time.Hour},
			domain.RetryPolicy{Strategy: domain.StrategyExponential, InitialInterval: 2 * time.Hour, Multiplier: 2, MaxInterval: 2 * time.Hour, Jitter: 0.1, MaxAttempts: 5}},
		{"a schedule implies the schedule strategy", domain.RetryPolicy{Schedule: schedule},
			domain.RetryPolicy{Strategy: domain.StrategySchedule, Schedule: schedule, MaxAttempts: 4}},
		{"schedule max_attempts defaults to len+1", domain.RetryPolicy{Strategy: domain.StrategySchedule, Schedule: schedule},
			domain.RetryPolicy{Strategy: domain.StrategySchedule, Schedule: schedule, MaxAttempts: 4}},
		{"schedule keeps a lower max_attempts", domain.RetryPolicy{Strategy: domain.StrategySchedule, Schedule: schedule, MaxAttempts: 2},
			domain.RetryPolicy{Strategy: domain.StrategySchedule, Schedule: schedule, MaxAttempts: 2}},
		{"schedule without entries gets max_attempts 1", domain.RetryPolicy{Strategy: domain.StrategySchedule},
			domain.RetryPolicy{Strategy: domain.StrategySchedule, MaxAttempts: 1}},
		{"unknown strategy is left for Validate", domain.RetryPolicy{Strategy: "linear"}, domain.RetryPolicy{Strategy: "linear"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.in.WithDefaults(); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("withDefaults(%+v) = %+v, want %+v", tt.in, got, tt.want)
			}
		})
	}
}

func TestNewSubscriptionRetryPolicy(t *testing.T) {
	t.Parallel()
	newSub := func(p *domain.RetryPolicy) (domain.Subscription, error) {
		return domain.NewSubscription(domain.NewSubscriptionInput{
			URL: "https://example.com/hook", EventTypes: []string{"order.*"}, RetryPolicy: p,
		}, classifyNow)
	}
	sub, err := newSub(nil)
	if err != nil || !reflect.DeepEqual(sub.RetryPolicy, domain.DefaultRetryPolicy()) {
		t.Fatalf("NewSubscription without a policy = %+v, %v; want the default", sub.RetryPolicy, err)
	}
	sub, err = newSub(&domain.RetryPolicy{Schedule: []time.Duration{time.Minute, time.Hour}})
	if err != nil || sub.RetryPolicy.Strategy != domain.StrategySchedule || sub.RetryPolicy.MaxAttempts != 3 {
		t.Fatalf("NewSubscription with a schedule = %+v, %v", sub.RetryPolicy, err)
	}
	_, err = newSub(&domain.RetryPolicy{Multiplier: 11})
	if ve, ok := errors.AsType[*domain.ValidationError](err); !ok || ve.Field != "retry_policy.multiplier" {
		t.Fatalf("NewSubscription with multiplier 11 = %v, want a retry_policy.multiplier ValidationError", err)
	}
}

func TestRetryPolicyValidate(t *testing.T) {
	t.Parallel()
	exp := func(change func(*domain.RetryPolicy)) domain.RetryPolicy {
		p := domain.DefaultRetryPolicy()
		change(&p)
		return p
	}
	sched := func(change func(*domain.RetryPolicy)) domain.RetryPolicy {
		p := domain.RetryPolicy{Strategy: domain.StrategySchedule, Schedule: []time.Duration{time.Minute, 5 * time.Minute}, MaxAttempts: 3}
		change(&p)
		return p
	}
	manyEntries := make([]time.Duration, 100)
	for i := range manyEntries {
		manyEntries[i] = time.Second
	}
	tests := []struct {
		name      string
		policy    domain.RetryPolicy
		wantField string // "" means valid
		wantMsg   string
	}{
		{"default", domain.DefaultRetryPolicy(), "", ""},
		{"lowest bounds", exp(func(p *domain.RetryPolicy) {
			p.InitialInterval, p.Multiplier, p.MaxInterval, p.Jitter, p.MaxAttempts = time.Millisecond, 1, time.Millisecond, 0, 1
		}), "", ""},
		{"highest bounds", exp(func(p *domain.RetryPolicy) {
			p.InitialInterval, p.Multiplier, p.MaxInterval, p.Jitter, p.MaxAttempts = 24*time.Hour, 10, week, 1, 100
		}), "", ""},
		{"empty strategy", exp(func(p *domain.RetryPolicy) { p.Strategy = "" }),
			"retry_policy.strategy", `must be "exponential" or "schedule", got ""`},
		{"unknown strategy", exp(func(p *domain.RetryPolicy) { p.Strategy = "linear" }),
			"retry_policy.strategy", `must be "exponential" or "schedule", got "linear"`},
		{"initial_interval zero", exp(func(p *domain.RetryPolicy) { p.InitialInterval = 0 }),
			"retry_policy.initial_interval", "must be between 1ms and 24h, got 0s"},
		{"initial_interval below 1ms", exp(func(p *domain.RetryPolicy) { p.InitialInterval = time.Millisecond - 1 }),
			"retry_policy.initial_interval", "must be between 1ms and 24h, got 999.999µs"},
		{"initial_interval above 24h", exp(func(p *domain.RetryPolicy) { p.InitialInterval, p.MaxInterval = 25*time.Hour, 25*time.Hour }),
			"retry_policy.initial_interval", "must be between 1ms and 24h, got 25h"},
		{"multiplier below 1", exp(func(p *domain.RetryPolicy) { p.Multiplier = 0.5 }),
			"retry_policy.multiplier", "must be between 1 and 10, got 0.5"},
		{"multiplier above 10", exp(func(p *domain.RetryPolicy) { p.Multiplier = 10.5 }),
			"retry_policy.multiplier", "must be between 1 and 10, got 10.5"},
		{"multiplier NaN", exp(func(p *domain.RetryPolicy) { p.Multiplier = math.NaN() }),
			"retry_policy.multiplier", "must be between 1 and 10, got NaN"},
		{"max_interval below initial", exp(func(p *domain.RetryPolicy) { p.InitialInterval, p.MaxInterval = time.Minute, 30*time.Second }),
			"retry_policy.max_interval", "must be between initial_interval (1m) and 168h, got 30s"},
		{"max_interval above a week", exp(func(p *domain.RetryPolicy) { p.MaxInterval = week + time.Second }),
			"retry_policy.max_interval", "must be between initial_interval (1s) and 168h, got 168h0m1s"},
		{"jitter negative", exp(func(p *domain.RetryPolicy) { p.Jitter = -0.1 }),
			"retry_policy.jitter", "must be between 0 and 1, got -0.1"},
		{"jitter above 1", exp(func(p *domain.RetryPolicy) { p.Jitter = 1.01 }),
			"retry_policy.jitter", "must be between 0 and 1, got 1.01"},
		{"jitter NaN", exp(func(p *domain.RetryPolicy) { p.Jitter = math.NaN() }),
			"retry_policy.jitter", "got NaN"},
		{"max_attempts zero", exp(func(p *domain.RetryPolicy) { p.MaxAttempts = 0 }),
			"retry_policy.max_attempts", "must be 1..100, got 0"},
		{"max_attempts above 100", exp(func(p *domain.RetryPolicy) { p.MaxAttempts = 101 }),
			"retry_policy.max_attempts", "must be 1..100, got 101"},
		{"exponential with a schedule", exp(func(p *domain.RetryPolicy) { p.Schedule = []time.Duration{time.Second} }),
			"retry_policy.schedule", `applies only to strategy "schedule", not "exponential"`},

		{"schedule", sched(func(*domain.RetryPolicy) {}), "", ""},
		{"schedule of 100 entries", sched(func(p *domain.RetryPolicy) { p.Schedule, p.MaxAttempts = manyEntries, 101 }), "", ""},
		{"schedule with fewer attempts than entries", sched(func(p *domain.RetryPolicy) { p.MaxAttempts = 1 }), "", ""},
		{"schedule entry bounds", sched(func(p *domain.RetryPolicy) { p.Schedule = []time.Duration{time.Millisecond, week} }), "", ""},
		{"schedule empty", sched(func(p *domain.RetryPolicy) { p.Schedule, p.MaxAttempts = nil, 1 }),
			"retry_policy.schedule", "must list 1..100 delays, got 0"},
		{"schedule of 101 entries", sched(func(p *domain.RetryPolicy) { p.Schedule = append(manyEntries, time.Second) }),
			"retry_policy.schedule", "must list 1..100 delays, got 101"},
		{"schedule entry zero", sched(func(p *domain.RetryPolicy) { p.Schedule = []time.Duration{time.Minute, 0} }),
			"retry_policy.schedule[1]", "must be between 1ms and 168h, got 0s"},
		{"schedule entry negative", sched(func(p *domain.RetryPolicy) { p.Schedule = []time.Duration{-time.Minute, time.Minute} }),
			"retry_policy.schedule[0]", "must be between 1ms and 168h, got -1m"},
		{"schedule entry above a week", sched(func(p *domain.RetryPolicy) { p.Schedule = []time.Duration{time.Minute, 8 * 24 * time.Hour} }),
			"retry_policy.schedule[1]", "must be between 1ms and 168h, got 192h"},
		{"schedule max_attempts above len+1", sched(func(p *domain.RetryPolicy) { p.MaxAttempts = 4 }),
			"retry_policy.max_attempts", "must be 1..3 (the first attempt plus one per schedule entry), got 4"},
		{"schedule max_attempts zero", sched(func(p *domain.RetryPolicy) { p.MaxAttempts = 0 }),
			"retry_policy.max_attempts", "got 0"},
		{"schedule with initial_interval", sched(func(p *domain.RetryPolicy) { p.InitialInterval = time.Second }),
			"retry_policy.initial_interval", `applies only to strategy "exponential", not "schedule"`},
		{"schedule with multiplier", sched(func(p *domain.RetryPolicy) { p.Multiplier = 2 }),
			"retry_policy.multiplier", `applies only to strategy "exponential"`},
		{"schedule with max_interval", sched(func(p *domain.RetryPolicy) { p.MaxInterval = time.Hour }),
			"retry_policy.max_interval", `applies only to strategy "exponential"`},
		{"schedule with jitter", sched(func(p *domain.RetryPolicy) { p.Jitter = 0.1 }),
			"retry_policy.jitter", `applies only to strategy "exponential"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			checkValidation(t, tt.policy.Validate(), tt.wantField, tt.wantMsg)
		})
	}
}

// checkValidation expects err to be nil (wantField "") or a
// *ValidationError for wantField whose message contains wantMsg.
func checkValidation(t *testing.T, err error, wantField, wantMsg string) {
	t.Helper()
	if wantField == "" {
		if err != nil {
			t.Fatalf("error = %v, want nil", err)
		}
		return
	}
	ve, ok := errors.AsType[*domain.ValidationError](err)
	if !ok {
		t.Fatalf("error = %v (%T), want a *ValidationError for %s", err, err, wantField)
	}
	if ve.Field != wantField || !strings.Contains(ve.Message, wantMsg) {
		t.Fatalf("error = %s: %s\nwant        %s: …%s…", ve.Field, ve.Message, wantField, wantMsg)
	}
}

func constant(r float64) func() float64 { return func() float64 { return r } }

func TestNextDelay(t *testing.T) {
	t.Parallel()
	def := domain.DefaultRetryPolicy()
	noJitter := def
	noJitter.Jitter = 0
	steep := domain.RetryPolicy{Strategy: domain.StrategyExponential, InitialInterval: time.Second, Multiplier: 10, MaxInterval: time.Minute, Jitter: 0.1, MaxAttempts: 100}
	nearCap := domain.RetryPolicy{Strategy: domain.StrategyExponential, InitialInterval: 57 * time.Second, Multiplier: 1, MaxInterval: time.Minute, Jitter: 0.1, MaxAttempts: 5}
	atCap := domain.RetryPolicy{Strategy: domain.StrategyExponential, InitialInterval: time.Hour, Multiplier: 2, MaxInterval: time.Hour, Jitter: 0.1, MaxAttempts: 5}
	fullJitter := def
	fullJitter.Jitter = 1
	sched := domain.RetryPolicy{Strategy: domain.StrategySchedule, Schedule: []time.Duration{time.Minute, 5 * time.Minute, 30 * time.Minute}, MaxAttempts: 4}
	longSched := sched
	longSched.MaxAttempts = 10 // invalid, but NextDelay stays total
	implicitSched := domain.RetryPolicy{Schedule: []time.Duration{2 * time.Minute}, MaxAttempts: 2}
	hugeMax := domain.RetryPolicy{Strategy: domain.StrategyExponential, InitialInterval: time.Second, Multiplier: 10, MaxInterval: math.MaxInt64, Jitter: 0.5, MaxAttempts: 100}

	tests := []struct {
		name       string
		policy     domain.RetryPolicy
		attempt    int
		retryAfter time.Duration
		rnd        func() float64
		want       time.Duration
		wantOK     bool
	}{
		{"first retry", def, 1, 0, nil, time.Second, true},
		{"second", def, 2, 0, nil, 2 * time.Second, true},
		{"third", def, 3, 0, nil, 4 * time.Second, true},
		{"fourth", def, 4, 0, nil, 8 * time.Second, true},
		{"fifth is the last attempt", def, 5, 0, nil, 0, false},
		{"beyond the last attempt", def, 6, 0, nil, 0, false},
		{"attempt 0 counts as 1", def, 0, 0, nil, time.Second, true},
		{"negative attempt counts as 1", def, -3, 0, nil, time.Second, true},
		{"zero jitter ignores rnd", noJitter, 3, 0, constant(0), 4 * time.Second, true},

		{"jitter low end", def, 1, 0, constant(0), 900 * time.Millisecond, true},
		{"jitter middle", def, 1, 0, constant(0.5), time.Second, true},
		{"jitter high end", def, 1, 0, constant(0.75), 1050 * time.Millisecond, true},
		{"rnd of 1 is clamped", def, 1, 0, constant(1), 1100 * time.Millisecond, true},
		{"rnd above 1 is clamped", def, 1, 0, constant(7), 1100 * time.Millisecond, true},
		{"negative rnd is clamped", def, 1, 0, constant(-1), 900 * time.Millisecond, true},
		{"NaN rnd is clamped", def, 1, 0, constant(math.NaN()), 900 * time.Millisecond, true},
		{"full jitter can reach zero", fullJitter, 1, 0, constant(0), 0, true},

		{"capped at max_interval", steep, 3, 0, nil, time.Minute, true},
		{"capped delay jitters below the cap, low", steep, 3, 0, constant(0), 54 * time.Second, true},
		{"capped delay jitters below the cap, high", steep, 3, 0, constant(1), time.Minute, true},
		{"band cut by the cap, top", nearCap, 1, 0, constant(1), time.Minute, true},
		{"band cut by the cap, middle", nearCap, 1, 0, constant(0.5), 55650 * time.Millisecond, true},
		{"band cut by the cap, bottom", nearCap, 1, 0, constant(0), 51300 * time.Millisecond, true},
		{"initial equal to max", atCap, 1, 0, constant(0.5), 57 * time.Minute, true},
		{"huge exponent does not overflow", steep, 99, 0, constant(0.5), 57 * time.Second, true},
		{"max_interval near MaxInt64 does not overflow", hugeMax, 99, 0, constant(1), math.MaxInt64, true},

		{"Retry-After longer than the delay wins", def, 1, 30 * time.Second, constant(0.5), 30 * time.Second, true},
		{"Retry-After shorter than the delay is ignored", def, 3, time.Second, nil, 4 * time.Second, true},
		{"Retry-After is capped at max_interval", def, 1, 2 * time.Hour, constant(0.5), time.Hour, true},
		{"negative Retry-After is ignored", def, 1, -time.Hour, nil, time.Second, true},
		{"Retry-After does not extend the last attempt", def, 5, time.Minute, nil, 0, false},

		{"schedule first", sched, 1, 0, nil, time.Minute, true},
		{"schedule second", sched, 2, 0, nil, 5 * time.Minute, true},
		{"schedule third", sched, 3, 0, nil, 30 * time.Minute, true},
		{"schedule exhausted", sched, 4, 0, nil, 0, false},
		{"schedule ignores rnd", sched, 1, 0, constant(0), time.Minute, true},
		{"schedule repeats its last entry", longSched, 7, 0, nil, 30 * time.Minute, true},
		{"schedule with Retry-After", sched, 1, 10 * time.Minute, nil, 10 * time.Minute, true},
		{"schedule caps Retry-After at its largest entry", sched, 1, 2 * time.Hour, nil, 30 * time.Minute, true},
		{"schedule implied by its entries", implicitSched, 1, 0, nil, 2 * time.Minute, true},

		{"zero policy never retries", domain.RetryPolicy{}, 1, 0, nil, 0, false},
		{"schedule strategy without entries never retries", domain.RetryPolicy{Strategy: domain.StrategySchedule, MaxAttempts: 3}, 1, 0, nil, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok := tt.policy.NextDelay(tt.attempt, tt.retryAfter, tt.rnd)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("NextDelay(%d, %s) = %s, %v; want %s, %v", tt.attempt, tt.retryAfter, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

// FuzzNextDelay checks NextDelay's promises. Any policy, valid or not,
// gets a non-negative delay and no panic; then the inputs are folded into
// the valid ranges, so every run also checks a valid exponential policy:
// retries stop exactly at MaxAttempts, the delay stays within the
// documented jitter band and under MaxInterval, Retry-After is honoured up
// to the cap, and the result depends only on the inputs.
func FuzzNextDelay(f *testing.F) {
	f.Add(int64(time.Second), 2.0, int64(time.Hour), 0.1, 5, 1, int64(0), 0.5)
	f.Add(int64(time.Millisecond), 10.0, int64(week), 1.0, 100, 99, int64(week), 0.999)
	f.Add(int64(time.Hour), 1.0, int64(time.Hour), 0.0, 1, 1, int64(time.Minute), 0.0)
	f.Add(int64(-1), math.NaN(), int64(math.MaxInt64), math.Inf(1), -1, math.MinInt, int64(math.MinInt64), math.NaN())
	f.Fuzz(func(t *testing.T, initial int64, mult float64, maxInterval int64, jitter float64, maxAttempts, attempt int, retryAfter int64, r float64) {
		raw := domain.RetryPolicy{
			Strategy: domain.StrategyExponential, InitialInterval: time.Duration(initial), Multiplier: mult,
			MaxInterval: time.Duration(maxInterval), Jitter: jitter, MaxAttempts: maxAttempts,
		}
		if got, _ := raw.NextDelay(attempt, time.Duration(retryAfter), constant(r)); got < 0 {
			t.Fatalf("NextDelay on %+v = %s, negative", raw, got)
		}

		fold := func(v, lo, hi int64) int64 { return lo + int64(uint64(v)%uint64(hi-lo+1)) }
		unit := func(x float64) float64 { // any float into [0,1]
			if math.IsNaN(x) || math.IsInf(x, 0) {
				return 0
			}
			return math.Abs(x - math.Trunc(x))
		}
		p := domain.RetryPolicy{
			Strategy:        domain.StrategyExponential,
			InitialInterval: time.Duration(fold(initial, int64(time.Millisecond), int64(24*time.Hour))),
			Multiplier:      1 + 9*unit(mult),
			Jitter:          unit(jitter),
			MaxAttempts:     int(fold(int64(maxAttempts), 1, 100)),
		}
		p.MaxInterval = time.Duration(fold(maxInterval, int64(p.InitialInterval), int64(week)))
		if err := p.Validate(); err != nil {
			t.Fatalf("folded policy invalid: %v", err)
		}
		attempt = int(fold(int64(attempt), -1, 101))
		ra := time.Duration(fold(retryAfter, -int64(time.Hour), int64(2*week)))
		rnd := constant(unit(r))

		got, ok := p.NextDelay(attempt, ra, rnd)
		if ok != (attempt < p.MaxAttempts) {
			t.Fatalf("NextDelay(%d) ok = %v with MaxAttempts %d", attempt, ok, p.MaxAttempts)
		}
		if !ok {
			if got != 0 {
				t.Fatalf("NextDelay(%d) = %s with ok false", attempt, got)
			}
			return
		}
		if again, _ := p.NextDelay(attempt, ra, rnd); again != got {
			t.Fatalf("NextDelay not deterministic: %s then %s", got, again)
		}
		if got < 0 || got > p.MaxInterval {
			t.Fatalf("NextDelay = %s outside [0, MaxInterval %s]", got, p.MaxInterval)
		}
		if got < min(ra, p.MaxInterval) {
			t.Fatalf("NextDelay = %s ignores Retry-After %s", got, ra)
		}
		base, _ := p.NextDelay(attempt, 0, nil)
		if lo := time.Duration(float64(base) * (1 - p.Jitter)); got < lo-1 { // 1ns of float rounding
			t.Fatalf("NextDelay = %s below %s, the jitter band of base %s", got, lo, base)
		}
		if attempt > 1 {
			if prev, _ := p.NextDelay(attempt-1, 0, nil); prev > base {
				t.Fatalf("base delay shrank from %s to %s", prev, base)
			}
		}
	})
}

func TestParseDurationField(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    time.Duration
		wantMsg string // "" means valid
	}{
		{"1.5s", 1500 * time.Millisecond, ""},
		{"5m", 5 * time.Minute, ""},
		{"2h30m", 150 * time.Minute, ""},
		{"300ms", 300 * time.Millisecond, ""},
		{"1ns", 1, ""},
		{"1us", time.Microsecond, ""},
		{"1µs", time.Microsecond, ""},
		{".5s", 500 * time.Millisecond, ""},
		{"168h", week, ""},

		{"", 0, `must be a duration such as "1.5s" or "5m", got an empty string`},
		{"0", 0, `must be positive, got "0"`},
		{"0s", 0, `must be positive, got "0s"`},
		{"-1s", 0, `must be a positive duration without a sign, got "-1s"`},
		{"+1s", 0, `must be a positive duration without a sign, got "+1s"`},
		{"10", 0, `must be a duration such as "1.5s" or "5m", got "10"`},
		{"1d", 0, `got "1d"`},
		{" 1s", 0, `got " 1s"`},
		{"1s ", 0, `got "1s "`},
		{"1 s", 0, `got "1 s"`},
		{"soon", 0, `got "soon"`},
		{"9999999999h", 0, `got "9999999999h"`},
		{`"1s"`, 0, `got "\"1s\""`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			got, err := domain.ParseDurationField("timeout", tt.in)
			if tt.wantMsg == "" {
				if err != nil || got != tt.want {
					t.Fatalf("ParseDurationField(%q) = %s, %v; want %s", tt.in, got, err, tt.want)
				}
				return
			}
			checkValidation(t, err, "timeout", tt.wantMsg)
		})
	}
}

// FuzzParseDurationField: what it accepts is exactly a positive Go
// duration without a sign or spaces, and every refusal names the field.
func FuzzParseDurationField(f *testing.F) {
	for _, s := range []string{"1.5s", "5m", "2h30m", "0", "-1s", "+1s", "1d", "", " 1s", "1e3s", ".s", "1.s", "9223372036854775807ns", "9223372036854775808ns"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := domain.ParseDurationField("retry_policy.schedule[0]", s)
		if err != nil {
			if ve, ok := errors.AsType[*domain.ValidationError](err); !ok || ve.Field != "retry_policy.schedule[0]" {
				t.Fatalf("ParseDurationField(%q) error %v is not a ValidationError for the field", s, err)
			}
			return
		}
		want, perr := time.ParseDuration(s)
		if perr != nil || got != want || got <= 0 || strings.ContainsAny(s[:1], "+- ") {
			t.Fatalf("ParseDurationField(%q) = %s; time.ParseDuration = %s, %v", s, got, want, perr)
		}
	})
}
