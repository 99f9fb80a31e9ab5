package application_test

import (
	"context"
	"testing"
	"time"

	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// heldRecords holds each RecordAttempt until release says it may write.
type heldRecords struct {
	ports.DeliveryClaims
	release chan struct{}
}

func (s *heldRecords) RecordAttempt(ctx context.Context, d domain.Delivery, a domain.Attempt) ([]string, error) {
	<-s.release
	return s.DeliveryClaims.RecordAttempt(ctx, d, a)
}

// TestRequestSlotsBoundRequestsNotRecords: with one request slot, a
// second delivery is not even claimed while the first's request is in
// flight, and goes out as soon as the first's endpoint has answered, while
// the first's outcome is still being recorded.
func TestRequestSlotsBoundRequestsNotRecords(t *testing.T) {
	t.Parallel()
	p := newPipeline()
	records := &heldRecords{DeliveryClaims: p.store, release: make(chan struct{}, 2)}
	sender := &heldSender{arrived: make(chan string, 2), release: make(chan struct{}, 2)}
	sender.script = []sendResult{answer(200), answer(200)}
	p.deliver.Deliveries, p.deliver.Sender = records, sender
	p.deliver.Requests = make(chan struct{}, 1)
	sub := p.subscribe(t, "a")
	_, first := p.fannedOut(t, sub)
	_, second := p.fannedOut(t, sub)

	done := make(chan error, 2)
	handle := func(id string) {
		_, err := p.handle(context.Background(), id)
		done <- err
	}
	go handle(first)
	<-sender.arrived
	go handle(second)
	time.Sleep(20 * time.Millisecond) // time enough to claim, were it free to
	if d, _ := p.store.GetDelivery(context.Background(), second); d.Status != domain.DeliveryPending {
		t.Errorf("second is %s while the first's request is in flight, want pending (not claimed)", d.Status)
	}

	sender.release <- struct{}{} // the first's endpoint answers; its record waits
	select {
	case <-sender.arrived:
	case <-time.After(5 * time.Second):
		t.Fatal("the second's request waited for the first's record")
	}
	sender.release <- struct{}{}
	records.release <- struct{}{}
	records.release <- struct{}{}
	for range 2 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
	for _, id := range []string{first, second} {
		if d, _ := p.store.GetDelivery(context.Background(), id); d.Status != domain.DeliveryDelivered {
			t.Errorf("%s is %s, want delivered", id, d.Status)
		}
	}
	if len(p.deliver.Requests) != 0 {
		t.Errorf("%d request slots still taken, want none", len(p.deliver.Requests))
	}
}
