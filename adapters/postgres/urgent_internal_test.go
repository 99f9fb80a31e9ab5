package postgres

import (
	"testing"

	"github.com/dispatch-webhooks/dispatch/domain"
)

// TestOnlyAnOrderedTerminalRecordIsUrgent: attempt records linger for
// company, except the one a next delivery in line waits on.
func TestOnlyAnOrderedTerminalRecordIsUrgent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		key    string
		status domain.DeliveryStatus
		want   bool
	}{
		{"", domain.DeliveryDelivered, false},
		{"", domain.DeliveryDead, false},
		{"", domain.DeliveryRetrying, false},
		{"order-1", domain.DeliveryRetrying, false},
		{"order-1", domain.DeliveryDelivered, true},
		{"order-1", domain.DeliveryDead, true},
	} {
		d := domain.Delivery{ID: "dlv_1", OrderingKey: tc.key, Status: tc.status}
		if got := nextWaitsOn(d); got != tc.want {
			t.Errorf("ordering key %q, %s: urgent %v, want %v", tc.key, tc.status, got, tc.want)
		}
	}
}
