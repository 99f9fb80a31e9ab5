package domain_test

import (
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/dispatch-webhooks/dispatch/domain"
)

// The hot paths of the pipeline that live in the domain, besides signing
// (BenchmarkSign): classifying an answer, matching an event against the
// subscriptions (fan-out), resolving an ordering key, and building the
// webhook body.

func BenchmarkClassify(b *testing.B) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		name       string
		code       int
		retryAfter string
	}{
		{"200", 200, ""},
		{"503", 503, ""},
		{"429/retry-after-seconds", 429, "120"},
		{"503/retry-after-date", 503, "Wed, 02 Jan 2030 03:06:05 GMT"},
		{"410", 410, ""},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				domain.ClassifyResponse(tc.code, tc.retryAfter, now)
			}
		})
	}
	b.Run("error/timeout", func(b *testing.B) {
		err := fmt.Errorf("post: %w", &net.OpError{Op: "read", Err: errors.New("i/o timeout")})
		b.ReportAllocs()
		for b.Loop() {
			domain.ClassifyError(err)
		}
	})
}

// BenchmarkFanOutMatching matches one event type against n active
// subscriptions, a tenth of which match, as fan-out does for every event.
func BenchmarkFanOutMatching(b *testing.B) {
	patterns := []string{"order.created", "order.*", "invoice.paid", "invoice.*", "customer.updated", "*"}
	for _, n := range []int{1, 50, 1000} {
		subs := make([]domain.Subscription, n)
		for i := range subs {
			types := []string{"shipment.sent", "refund.created"}
			if i%10 == 0 {
				types = append(types, patterns[i/10%len(patterns)])
			}
			subs[i] = domain.Subscription{EventTypes: types, Active: true}
		}
		b.Run(fmt.Sprintf("subscriptions=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			matched := 0
			for b.Loop() {
				for _, sub := range subs {
					if sub.Matches("order.created") {
						matched++
					}
				}
			}
			if matched == 0 && n >= 10 {
				b.Fatal("nothing matched")
			}
		})
	}
}

func BenchmarkOrderingKeyFor(b *testing.B) {
	ev := domain.Event{
		ID: "evt_01J0000000000000000000000", Type: "order.created", OrderingKey: "k",
		Data: []byte(`{"order_id":"ord_1","customer":{"id":"cus_42","name":"Ada"},"total":12.5,"lines":[1,2,3]}`),
	}
	for _, pointer := range []string{"", "/ordering_key", "/data/customer/id"} {
		sub := domain.Subscription{OrderingKey: pointer}
		b.Run("pointer="+pointer, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				domain.OrderingKeyFor(sub, ev)
			}
		})
	}
}

func BenchmarkWebhookPayload(b *testing.B) {
	data := []byte(`{"blob":"` + string(make([]byte, 0)) + fmt.Sprintf("%01000d", 0) + `"}`)
	ev := domain.Event{
		ID: "evt_01J0000000000000000000000", Type: "order.created", Source: "shop",
		Data: data, CreatedAt: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC),
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		ev.WebhookPayload()
	}
}
