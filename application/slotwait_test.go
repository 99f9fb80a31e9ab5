package application_test

import (
	"context"
	"testing"
	"time"

	"github.com/dispatch-webhooks/dispatch/application"
	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// heldSender holds each request until release says it may answer.
type heldSender struct {
	scriptedSender
	arrived chan string
	release chan struct{}
}

func (s *heldSender) Send(ctx context.Context, req ports.WebhookRequest) (ports.WebhookResponse, error) {
	s.arrived <- req.Header.Get("Webhook-Id")
	<-s.release
	return s.scriptedSender.Send(ctx, req)
}

// TestARefusedDeliveryTakesTheSlotARequestOfThisProcessFrees: with one
// slot, held by a request in flight, a second delivery of the same
// subscription waits in the worker instead of being postponed, and is
// attempted as soon as the first request ends; whether the protections
// are asked one by one or together.
func TestARefusedDeliveryTakesTheSlotARequestOfThisProcessFrees(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		protect func(*pipeline) (refused func() int)
	}{
		{"separate ports", func(p *pipeline) func() int {
			g := &gate{limit: 1}
			protected(p, g)
			return func() int { g.mu.Lock(); defer g.mu.Unlock(); return g.refused }
		}},
		{"combined protection", func(p *pipeline) func() int {
			both := &together{limit: 1}
			protected(p, &gate{})
			p.deliver.Protection = both
			return func() int { both.mu.Lock(); defer both.mu.Unlock(); return len(both.admitted) - len(both.finished) }
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := newPipeline()
			refused := tt.protect(p)
			sender := &heldSender{arrived: make(chan string, 2), release: make(chan struct{}, 2)}
			sender.script = []sendResult{answer(200), answer(200)}
			p.deliver.Sender = sender
			sub := p.subscribe(t, "a")
			_, first := p.fannedOut(t, sub)
			_, second := p.fannedOut(t, sub)

			results := make(chan application.Attempted, 2)
			handle := func(id string) {
				res, err := p.handle(context.Background(), id)
				if err != nil {
					t.Error(err)
				}
				results <- res
			}
			go handle(first)
			<-sender.arrived // the first holds the slot, its request in flight
			go handle(second)
			waitUntil(t, func() bool { return application.Waiting(p.deliver, sub.ID) == 1 })
			// Both may answer: if the second is postponed instead, only
			// the first asks.
			sender.release <- struct{}{}
			sender.release <- struct{}{}

			for range 2 {
				if res := <-results; res.Skipped || res.Delivery.Status != domain.DeliveryDelivered {
					t.Errorf("result = %+v, want an attempt that succeeded", res)
				}
			}
			if n := refused(); n != 1 {
				t.Errorf("refused %d times, want once", n)
			}
			if n := application.Waiting(p.deliver, sub.ID); n != 0 {
				t.Errorf("%d still waiting, want none", n)
			}
		})
	}
}

// TestSlotWaitersAreCappedAtMaxInFlight: once as many deliveries as the
// subscription has slots wait for one, the next is postponed at once,
// without waiting.
func TestSlotWaitersAreCappedAtMaxInFlight(t *testing.T) {
	t.Parallel()
	p := newPipeline()
	protected(p, &gate{full: true})
	sub, err := p.subs.Create(context.Background(), domain.NewSubscriptionInput{
		URL: "https://example.com/hook", EventTypes: []string{"a"}, MaxInFlight: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	_, first := p.fannedOut(t, sub)
	_, second := p.fannedOut(t, sub)

	done := make(chan application.Attempted, 1)
	go func() {
		res, _ := p.handle(context.Background(), first)
		done <- res
	}()
	waitUntil(t, func() bool { return application.Waiting(p.deliver, sub.ID) == 1 })
	start := time.Now()
	var res application.Attempted
	res, err = p.handle(context.Background(), second)
	if err != nil || res.Postponed != domain.ReasonThrottled {
		t.Fatalf("second = %+v, %v; want postponed (throttled)", res, err)
	}
	if waited := time.Since(start); waited >= 100*time.Millisecond {
		t.Errorf("the second waited %s; want it postponed without waiting", waited)
	}
	if first := <-done; first.Postponed != domain.ReasonThrottled {
		t.Errorf("first = %+v, want postponed (throttled) once its wait ended", first)
	}
}

// waitUntil polls cond for up to a few seconds.
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
	}
}
