package application_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dispatch-webhooks/dispatch/application"
	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// TestAThrottledDeliveryIsPostponedToItsTurn: deliveries the rate limit
// refuses are postponed at once, without an attempt and holding nothing
// of the worker, each due at its turn at the limit's pace: the first when
// the limit's next request comes, the next one interval later; whether
// the shared protection refuses or, when it fails, the local one.
func TestAThrottledDeliveryIsPostponedToItsTurn(t *testing.T) {
	t.Parallel()
	const throttle = 5 * time.Millisecond
	tests := []struct {
		name    string
		protect func(*pipeline)
	}{
		{"shared", func(p *pipeline) { protected(p, &gate{throttle: throttle}) }},
		{"local", func(p *pipeline) {
			protected(p, &gate{throttle: throttle})
			p.deliver.Protection, p.deliver.Local = &together{admitErr: errors.New("redis: connection refused")}, p.deliver.Protection
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := newPipeline()
			tt.protect(p)
			p.deliver.Requests = make(chan struct{}, 4)
			sub := p.subscribe(t, "a") // 100 requests/s: one each 10 ms
			for i, want := range []time.Duration{throttle, throttle + 10*time.Millisecond} {
				_, id := p.fannedOut(t, sub)
				res, err := p.handle(context.Background(), id)
				if err != nil || res.Postponed != domain.ReasonThrottled || !res.Skipped {
					t.Fatalf("delivery %d = %+v, %v; want postponed (throttled)", i, res, err)
				}
				if due := res.Delivery.NextAttemptAt.Sub(p.clock.Now()); due != want {
					t.Errorf("delivery %d due in %s, want %s", i, due, want)
				}
				if len(p.deliver.Requests) != 0 || application.SharesHeld(p.deliver, sub.ID) != 0 {
					t.Errorf("delivery %d postponed holding a request slot", i)
				}
			}
			if len(p.sender.requests) != 0 {
				t.Errorf("%d requests sent, want none", len(p.sender.requests))
			}
		})
	}
}

// TestADeliveryWithoutASlotIsPostponedAtOnce: a delivery whose endpoint's
// concurrency slots are all taken is postponed at once by slotWait
// (jittered), holding nothing of the worker meanwhile.
func TestADeliveryWithoutASlotIsPostponedAtOnce(t *testing.T) {
	t.Parallel()
	p := newPipeline()
	protected(p, &gate{full: true})
	p.deliver.Requests = make(chan struct{}, 4)
	sub := p.subscribe(t, "a")
	_, id := p.fannedOut(t, sub)
	res, err := p.handle(context.Background(), id)
	if err != nil || res.Postponed != domain.ReasonThrottled {
		t.Fatalf("result = %+v, %v; want postponed (throttled)", res, err)
	}
	// slotWait, 100 ms, plus half as much again (Random is 0.5).
	if due := res.Delivery.NextAttemptAt.Sub(p.clock.Now()); due != 150*time.Millisecond {
		t.Errorf("due in %s, want 150ms", due)
	}
	if len(p.deliver.Requests) != 0 || application.SharesHeld(p.deliver, sub.ID) != 0 {
		t.Error("postponed holding a request slot")
	}
}

// TestAPostponedThrottledDeliveryIsAppendedAgainWhenDue: a delivery
// postponed because every slot was taken comes back to the stream by
// itself when it is due, without waiting for the scheduler's scan; one
// due later than the worker appends them again itself is left to the
// scan.
func TestAPostponedThrottledDeliveryIsAppendedAgainWhenDue(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		gate   *gate
		append bool
	}{
		{"every slot taken", &gate{full: true}, true},
		{"due in two seconds", &gate{throttle: 2 * time.Second}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := newPipeline()
			protected(p, tt.gate)
			p.deliver.Queue = p.queue
			sub := p.subscribe(t, "a")
			_, id := p.fannedOut(t, sub)
			before := len(p.queue.bodies(ports.DeliveryStream))
			res, err := p.handle(context.Background(), id)
			if err != nil || res.Postponed != domain.ReasonThrottled {
				t.Fatalf("result = %+v, %v; want postponed (throttled)", res, err)
			}
			if !tt.append {
				if n := application.Requeues(p.deliver); n != 0 {
					t.Errorf("%d appends scheduled, want none", n)
				}
				return
			}
			waitUntil(t, func() bool {
				for _, body := range p.queue.bodies(ports.DeliveryStream)[before:] {
					if body == id {
						return true
					}
				}
				return false
			})
		})
	}
}

// TestASubscriptionOverItsShareIsPostponedWhileOthersGoThrough: with four
// request slots, a subscription whose endpoint holds two requests (half
// the worker, its share alone) has its next delivery postponed at once,
// without an attempt and holding no slot, while another subscription's
// delivery is attempted; and one whose max_in_flight is 1 gets no more.
func TestASubscriptionOverItsShareIsPostponedWhileOthersGoThrough(t *testing.T) {
	t.Parallel()
	p := newPipeline()
	sender := &heldSender{arrived: make(chan string, 4), release: make(chan struct{}, 4)}
	sender.script = []sendResult{answer(200), answer(200), answer(200), answer(200)}
	p.deliver.Sender = sender
	p.deliver.Requests = make(chan struct{}, 4)
	hanging := p.subscribe(t, "hang")
	done := make(chan error, 4)
	handle := func(id string) {
		_, err := p.handle(context.Background(), id)
		done <- err
	}
	for range 2 {
		_, id := p.fannedOut(t, hanging)
		go handle(id)
		<-sender.arrived
	}

	_, over := p.fannedOut(t, hanging)
	res, err := p.handle(context.Background(), over)
	if err != nil || res.Postponed != domain.ReasonThrottled || res.Delivery.Attempts != 0 {
		t.Fatalf("third delivery of the hanging endpoint = %+v, %v; want postponed (throttled) without an attempt", res, err)
	}
	if n := len(p.deliver.Requests); n != 2 {
		t.Errorf("%d request slots taken, want the hanging endpoint's 2", n)
	}

	one, err := p.subs.Create(context.Background(), domain.NewSubscriptionInput{
		URL: "https://example.com/one", EventTypes: []string{"one"}, MaxInFlight: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	_, first := p.fannedOut(t, one)
	go handle(first)
	<-sender.arrived // attempted beside the hanging endpoint's two
	_, second := p.fannedOut(t, one)
	if res, err := p.handle(context.Background(), second); err != nil || res.Postponed != domain.ReasonThrottled {
		t.Errorf("second delivery of a subscription with max_in_flight 1 = %+v, %v; want postponed (throttled)", res, err)
	}

	for range 3 {
		sender.release <- struct{}{}
	}
	for range 3 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
	if n := len(p.deliver.Requests); n != 0 {
		t.Errorf("%d request slots still taken, want none", n)
	}
	for _, sub := range []string{hanging.ID, one.ID} {
		if n := application.SharesHeld(p.deliver, sub); n != 0 {
			t.Errorf("%s still holds %d of its share, want none", sub, n)
		}
	}
}

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

// waitUntil polls cond for up to a few seconds.
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
	}
}

// TestADeliveryOverItsShareWaitsInTheWorkerForAPlace: with Report set, a
// delivery of a subscription at its share of the worker is parked (no
// attempt, nothing written back, no request slot held) and attempted as
// soon as one of that subscription's requests ends, in its place.
func TestADeliveryOverItsShareWaitsInTheWorkerForAPlace(t *testing.T) {
	t.Parallel()
	p, sender, reports, sub, done := atItsShare(t, "busy", 3)

	ev, over := p.fannedOut(t, sub)
	res, err := p.handle(context.Background(), over)
	if err != nil || !res.Parked || !res.Skipped || res.Postponed != "" {
		t.Fatalf("third delivery = %+v, %v; want parked", res, err)
	}
	if n := len(p.deliver.Requests); n != 2 {
		t.Errorf("%d request slots taken while parked, want the 2 in flight", n)
	}
	if d, err := p.store.GetDelivery(context.Background(), over); err != nil || d.Reason != "" || d.Attempts != 0 {
		t.Errorf("parked delivery in the store = %+v, %v; want it as claimed, not postponed", d, err)
	}

	sender.release <- struct{}{} // one request ends: its place is the parked delivery's
	if id := <-sender.arrived; id != ev.ID {
		t.Fatalf("request for %s, want the parked delivery's event %s", id, ev.ID)
	}
	if n := application.SharesHeld(p.deliver, sub.ID); n != 2 {
		t.Errorf("share holds %d, want 2 (the place was handed over)", n)
	}
	sender.release <- struct{}{}
	sender.release <- struct{}{}
	got := <-reports
	if got.Parked || got.Delivery.ID != over || got.Delivery.Status != domain.DeliveryDelivered {
		t.Errorf("report = %+v, want the parked delivery delivered", got)
	}
	for range 2 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
	waitUntil(t, func() bool {
		return len(p.deliver.Requests) == 0 && application.SharesHeld(p.deliver, sub.ID) == 0
	})
}

// TestAParkedDeliveryWithoutAPlaceIsPostponed: a parked delivery whose
// subscription's requests do not end is postponed after a short wait, as
// it would have been at once without parking, and reported.
func TestAParkedDeliveryWithoutAPlaceIsPostponed(t *testing.T) {
	t.Parallel()
	p, sender, reports, sub, done := atItsShare(t, "hang", 2)
	_, over := p.fannedOut(t, sub)
	if res, err := p.handle(context.Background(), over); err != nil || !res.Parked {
		t.Fatalf("third delivery = %+v, %v; want parked", res, err)
	}
	got := <-reports // the hanging requests hold their places
	if got.Postponed != domain.ReasonThrottled || got.Delivery.ID != over || got.Delivery.Attempts != 0 {
		t.Errorf("report = %+v, want the parked delivery postponed (throttled) without an attempt", got)
	}
	if d, err := p.store.GetDelivery(context.Background(), over); err != nil || d.Reason != domain.ReasonThrottled {
		t.Errorf("delivery in the store = %+v, %v; want postponed", d, err)
	}
	sender.release <- struct{}{}
	sender.release <- struct{}{}
	for range 2 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
	if n := application.SharesHeld(p.deliver, sub.ID); n != 0 {
		t.Errorf("share holds %d, want none", n)
	}
}

// atItsShare is a worker of 4 request slots whose Report sends to reports,
// with two requests of one subscription (of eventType) held at its
// endpoint (sender): the subscription's fair share of the worker. The
// sender answers 200 to the first answers requests; each handled delivery
// tells done when it ends.
func atItsShare(t *testing.T, eventType string, answers int) (*pipeline, *heldSender, chan application.Attempted, domain.Subscription, chan error) {
	t.Helper()
	p := newPipeline()
	sender := &heldSender{arrived: make(chan string, 4), release: make(chan struct{}, 4)}
	for range answers {
		sender.script = append(sender.script, answer(200))
	}
	p.deliver.Sender = sender
	p.deliver.Requests = make(chan struct{}, 4)
	reports := make(chan application.Attempted, 1)
	p.deliver.Report = func(res application.Attempted, err error) {
		if err != nil {
			t.Error(err)
		}
		reports <- res
	}
	sub := p.subscribe(t, eventType)
	done := make(chan error, 2)
	for range 2 {
		_, id := p.fannedOut(t, sub)
		go func() {
			_, err := p.handle(context.Background(), id)
			done <- err
		}()
		<-sender.arrived
	}
	return p, sender, reports, sub, done
}
