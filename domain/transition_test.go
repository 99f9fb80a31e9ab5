package domain

import (
	"testing"
	"time"
)

func TestDeliveryAttempted(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	noJitter := func() float64 { return 0.5 } // factor 1: exact delays
	policy := RetryPolicy{Strategy: StrategyExponential, InitialInterval: time.Second, Multiplier: 2,
		MaxInterval: time.Hour, Jitter: 0.1, MaxAttempts: 3}
	tests := []struct {
		name      string
		attempts  int
		outcome   Outcome
		status    DeliveryStatus
		nextAfter time.Duration // from now; checked only when retrying
	}{
		{"success delivers", 0, Outcome{Kind: OutcomeSuccess}, DeliveryDelivered, 0},
		{"first failure retries after initial", 0, Outcome{Kind: OutcomeRetryable}, DeliveryRetrying, time.Second},
		{"second failure doubles", 1, Outcome{Kind: OutcomeRetryable}, DeliveryRetrying, 2 * time.Second},
		{"retry-after wins when longer", 0, Outcome{Kind: OutcomeRetryable, RetryAfter: 7 * time.Second}, DeliveryRetrying, 7 * time.Second},
		{"last attempt dies", 2, Outcome{Kind: OutcomeRetryable}, DeliveryDead, 0},
		{"permanent dies at once", 0, Outcome{Kind: OutcomePermanent}, DeliveryDead, 0},
		{"gone dies at once", 0, Outcome{Kind: OutcomeGone}, DeliveryDead, 0},
		{"success on the last attempt delivers", 2, Outcome{Kind: OutcomeSuccess}, DeliveryDelivered, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := Delivery{ID: "dlv_1", Status: DeliveryDelivering, Attempts: tt.attempts, Reason: ReasonThrottled}
			got := d.Attempted(tt.outcome, policy, now, noJitter)
			if got.Status != tt.status {
				t.Errorf("status = %s, want %s", got.Status, tt.status)
			}
			if got.Attempts != tt.attempts+1 {
				t.Errorf("attempts = %d, want %d", got.Attempts, tt.attempts+1)
			}
			if got.Reason != "" {
				t.Errorf("reason = %q, want cleared", got.Reason)
			}
			if !got.UpdatedAt.Equal(now) {
				t.Errorf("updated_at = %s, want %s", got.UpdatedAt, now)
			}
			if tt.status == DeliveryRetrying && !got.NextAttemptAt.Equal(now.Add(tt.nextAfter)) {
				t.Errorf("next attempt at %s, want %s", got.NextAttemptAt, now.Add(tt.nextAfter))
			}
		})
	}
}
