package domain

import (
	"testing"
	"time"
)

func TestRetentionWindow(t *testing.T) {
	t.Parallel()
	tests := []struct {
		retention, want time.Duration
	}{
		{time.Minute, 15 * time.Second},
		{720 * time.Hour, 180 * time.Hour},
		{61 * time.Second, 15 * time.Second},                      // 15.25 s rounds to a whole second
		{90 * time.Second, 23 * time.Second},                      // 22.5 s rounds up
		{time.Hour + 2*time.Second, 15*time.Minute + time.Second}, // 15 min 0.5 s rounds up
	}
	for _, tt := range tests {
		if got := RetentionWindow(tt.retention); got != tt.want {
			t.Errorf("RetentionWindow(%s) = %s, want %s", tt.retention, got, tt.want)
		}
	}
}

func TestValidateRetention(t *testing.T) {
	t.Parallel()
	for _, ok := range []time.Duration{time.Minute, DefaultRetention} {
		if err := ValidateRetention(ok); err != nil {
			t.Errorf("ValidateRetention(%s) = %v", ok, err)
		}
	}
	for _, bad := range []time.Duration{0, -time.Hour, 59 * time.Second} {
		if err := ValidateRetention(bad); err == nil {
			t.Errorf("ValidateRetention(%s) accepted it", bad)
		}
	}
}
