package application_test

import (
	"context"
	"testing"
	"time"

	"github.com/dispatch-webhooks/dispatch/application"
	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// refusingDeliveries is a delivery store that refuses the fan-out of one
// event, as PostgreSQL refuses a row it cannot store, and stores the rest.
type refusingDeliveries struct {
	ports.DeliveryFanOut
	refuse string
}

func (s refusingDeliveries) CreateDeliveries(ctx context.Context, fanouts []ports.FanOut) ([]string, error) {
	var rest []ports.FanOut
	for _, f := range fanouts {
		if f.EventID != s.refuse {
			rest = append(rest, f)
		}
	}
	created, err := s.DeliveryFanOut.CreateDeliveries(ctx, rest)
	if err != nil {
		return created, err
	}
	return created, &ports.RejectedFanOuts{Reasons: map[string]string{s.refuse: "invalid byte sequence"}}
}

// An event whose fan-out the store refuses fails alone: its batch-mates
// are fanned out and their deliveries appended at once, the batch is done
// (nil: its entries are acknowledged), and the event, left to the outbox
// sweep, is settled as failed, with its reason and counted, on its third
// try, never tried for ever.
func TestRefusedFanOutFailsAloneAndIsSettledAfterItsTries(t *testing.T) {
	t.Parallel()
	p := newPipeline()
	p.subscribe(t, "order.*")
	clean1, bad, clean2 := p.publish(t, "order.created", ""), p.publish(t, "order.created", ""), p.publish(t, "order.created", "")
	var failed []string
	p.fanout.Deliveries = refusingDeliveries{DeliveryFanOut: p.store, refuse: bad.ID}
	p.fanout.Failed = func(id, reason string) { failed = append(failed, id+": "+reason) }

	if err := p.fanout.Handle(context.Background(), []string{clean1.ID, bad.ID, clean2.ID}); err != nil {
		t.Fatalf("Handle = %v, want nil: the clean events are done", err)
	}
	if got := p.queue.bodies(ports.DeliveryStream); len(got) != 2 {
		t.Fatalf("delivery stream = %v, want the clean events' two deliveries", got)
	}
	for try := 2; try <= application.DefaultFanOutTries; try++ {
		ev, err := p.store.GetEvent(context.Background(), bad.ID)
		if err != nil || ev.Status != domain.EventPending || len(failed) != 0 {
			t.Fatalf("before try %d: event = %+v, %v; failed = %v; want pending, not settled", try, ev, err, failed)
		}
		if err := p.fanout.Handle(context.Background(), []string{bad.ID}); err != nil {
			t.Fatalf("try %d: Handle = %v", try, err)
		}
	}
	ev, err := p.store.GetEvent(context.Background(), bad.ID)
	if err != nil || ev.Status != domain.EventFailed || ev.FailureReason != "invalid byte sequence" {
		t.Fatalf("after %d tries: event = %+v, %v; want failed with the store's reason", application.DefaultFanOutTries, ev, err)
	}
	if len(failed) != 1 || failed[0] != bad.ID+": invalid byte sequence" {
		t.Fatalf("Failed told %v, want the settled event once", failed)
	}
	swept, err := p.store.UnfannedEvents(context.Background(), p.clock.Now().Add(24*time.Hour), 0, 10)
	if err != nil || len(swept) != 0 {
		t.Fatalf("outbox sweep = %v, %v; want nothing: a settled event is never tried again", swept, err)
	}
}
