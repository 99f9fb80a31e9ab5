package application_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/dispatch-webhooks/dispatch/application"
	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// inlinePipeline is newPipeline with inline fan-out of up to limit
// deliveries at ingest.
func inlinePipeline(limit int) *pipeline {
	p := newPipeline()
	p.ingest.MaxInlineDeliveries = limit
	return p
}

func TestPublishFansOutInlineAndAppendsTheDeliveries(t *testing.T) {
	t.Parallel()
	p := inlinePipeline(0) // the default limit
	ctx := context.Background()
	exact := p.subscribe(t, "order.created")
	wildcard := p.subscribe(t, "order.*")
	p.subscribe(t, "invoice.paid")
	ev := p.publish(t, "order.created", "")

	if got := p.queue.bodies(ports.EventStream); len(got) != 0 {
		t.Errorf("event stream = %v, want nothing: the event is fanned out", got)
	}
	view, err := p.events.Get(ctx, ev.ID, ports.Page{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var subs, ids []string
	for _, d := range view.Deliveries {
		subs = append(subs, d.SubscriptionID)
		ids = append(ids, d.ID)
	}
	slices.Sort(subs)
	if want := []string{exact.ID, wildcard.ID}; !slices.Equal(subs, want) {
		t.Errorf("deliveries go to %v, want %v", subs, want)
	}
	var entries []string
	for _, body := range p.queue.bodies(ports.DeliveryStream) {
		id, fresh := application.DeliveryEntry(body)
		if !fresh {
			t.Errorf("entry %q is plain, want the creator's fresh entry", body)
		}
		entries = append(entries, id)
	}
	if !slices.Equal(entries, ids) {
		t.Errorf("delivery stream names %v, want the event's deliveries %v", entries, ids)
	}
	if view.Event.Status != domain.EventPending {
		t.Errorf("status = %s, want pending", view.Event.Status)
	}
	// The fan-out stage finds nothing left to do for it.
	if err := p.fanout.Handle(ctx, []string{ev.ID}); err != nil {
		t.Fatal(err)
	}
	if n := len(p.queue.bodies(ports.DeliveryStream)); n != 2 {
		t.Errorf("%d deliveries enqueued after the stage saw the event, want still 2", n)
	}
}

func TestPublishWithNoMatchIsDeliveredAtOnce(t *testing.T) {
	t.Parallel()
	p := inlinePipeline(0)
	p.subscribe(t, "invoice.*")
	res, err := p.ingest.Publish(context.Background(), domain.NewEventInput{Type: "order.created", Data: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Event.Status != domain.EventDelivered {
		t.Errorf("publish answered status %s, want delivered (nothing to do)", res.Event.Status)
	}
	if n := len(p.queue.bodies(ports.EventStream)) + len(p.queue.bodies(ports.DeliveryStream)); n != 0 {
		t.Errorf("%d stream entries, want none", n)
	}
	got, _ := p.store.GetEvent(context.Background(), res.Event.ID)
	if got.Status != domain.EventDelivered {
		t.Errorf("stored status = %s, want delivered", got.Status)
	}
}

func TestPublishWithManyMatchesGoesThroughTheStage(t *testing.T) {
	t.Parallel()
	p := inlinePipeline(2)
	for range 3 {
		p.subscribe(t, "order.*")
	}
	ev := p.publish(t, "order.created", "")
	if got := p.queue.bodies(ports.EventStream); !slices.Equal(got, []string{ev.ID}) {
		t.Errorf("event stream = %v, want [%s]", got, ev.ID)
	}
	if n := len(p.queue.bodies(ports.DeliveryStream)); n != 0 {
		t.Errorf("%d deliveries enqueued at ingest, want none", n)
	}
	if err := p.fanout.Handle(context.Background(), []string{ev.ID}); err != nil {
		t.Fatal(err)
	}
	if n := len(p.queue.bodies(ports.DeliveryStream)); n != 3 {
		t.Errorf("%d deliveries after the stage, want 3", n)
	}
}

func TestPublishWithAKeyGoesThroughTheStage(t *testing.T) {
	t.Parallel()
	p := inlinePipeline(0)
	p.subscribe(t, "*")
	ev := p.publish(t, "order.created", "key-1")
	if got := p.queue.bodies(ports.EventStream); !slices.Equal(got, []string{ev.ID}) {
		t.Errorf("event stream = %v, want [%s]: keyed events are stored by CreateEvent", got, ev.ID)
	}
}

func TestInlinePublishKeepsTheDeliveriesWhenTheQueueFails(t *testing.T) {
	t.Parallel()
	p := inlinePipeline(0)
	p.subscribe(t, "*")
	p.queue.fail = errors.New("redis down")
	res, err := p.ingest.Publish(context.Background(), domain.NewEventInput{Type: "a", Data: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatalf("publish failed although the event was committed: %v", err)
	}
	if res.EnqueueErr == nil {
		t.Error("EnqueueErr not set")
	}
	view, err := p.events.Get(context.Background(), res.Event.ID, ports.Page{Limit: 100})
	if err != nil || len(view.Deliveries) != 1 {
		t.Fatalf("event = %+v, %v; want durable with its delivery (the due scan enqueues it)", view, err)
	}
}
