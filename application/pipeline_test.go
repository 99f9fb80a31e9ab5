package application_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/dispatch-webhooks/dispatch/adapters/memory"
	"github.com/dispatch-webhooks/dispatch/application"
	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// pipeline wires the use cases on the memory store, a recording queue, a
// scripted sender and a settable clock.
type pipeline struct {
	store   *memory.Store
	queue   *recordingQueue
	sender  *scriptedSender
	clock   *clock
	ingest  *application.Ingest
	fanout  *application.FanOut
	deliver *application.Deliver
	subs    *application.Subscriptions
	events  *application.Events
}

func newPipeline() *pipeline {
	p := &pipeline{store: memory.NewStore(), queue: newRecordingQueue(), sender: &scriptedSender{}, clock: newClock()}
	// Most tests drive the fan-out stage; inline_test.go covers inline
	// fan-out at ingest.
	p.ingest = &application.Ingest{Events: p.store, Queue: p.queue, Clock: p.clock, MaxInlineDeliveries: -1}
	p.fanout = &application.FanOut{Subscriptions: p.store, Events: p.store, Deliveries: p.store, Queue: p.queue, Clock: p.clock}
	p.deliver = &application.Deliver{Deliveries: p.store, Subscriptions: p.store, Sender: p.sender, Clock: p.clock,
		Random: func() float64 { return 0.5 }, UserAgent: "Dispatch/test"}
	p.subs = &application.Subscriptions{Store: p.store, Clock: p.clock}
	p.events = &application.Events{Events: p.store, Deliveries: p.store}
	return p
}

func (p *pipeline) subscribe(t *testing.T, types ...string) domain.Subscription {
	t.Helper()
	sub, err := p.subs.Create(context.Background(), domain.NewSubscriptionInput{URL: "https://example.com/hook", EventTypes: types})
	if err != nil {
		t.Fatalf("create subscription: %v", err)
	}
	return sub
}

func (p *pipeline) publish(t *testing.T, typ, key string) domain.Event {
	t.Helper()
	res, err := p.ingest.Publish(context.Background(), domain.NewEventInput{
		Type: typ, Source: "test", Data: json.RawMessage(`{"n": 1}`), IdempotencyKey: key,
	})
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	return res.Event
}

func TestPublishCommitsThenEnqueues(t *testing.T) {
	t.Parallel()
	p := newPipeline()
	ev := p.publish(t, "order.created", "")
	if got := p.queue.bodies(ports.EventStream); len(got) != 1 || got[0] != ev.ID {
		t.Fatalf("event stream = %v, want [%s]", got, ev.ID)
	}
	stored, err := p.store.GetEvent(context.Background(), ev.ID)
	if err != nil || stored.Status != domain.EventPending || string(stored.Data) != `{"n":1}` {
		t.Fatalf("stored event = %+v, %v; want pending with compact data", stored, err)
	}
}

func TestPublishReplaysIdempotencyKey(t *testing.T) {
	t.Parallel()
	p := newPipeline()
	first := p.publish(t, "order.created", "key-1")
	res, err := p.ingest.Publish(context.Background(), domain.NewEventInput{
		Type: "order.updated", Source: "other", Data: json.RawMessage(`{}`), IdempotencyKey: "key-1",
	})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Replayed || res.Event.ID != first.ID || res.Event.Type != "order.created" {
		t.Errorf("replay = %+v, want the first event, replayed", res)
	}
	if n := len(p.queue.bodies(ports.EventStream)); n != 1 {
		t.Errorf("event stream has %d entries, want 1 (a replay enqueues nothing)", n)
	}
}

func TestPublishKeepsTheEventWhenTheQueueFails(t *testing.T) {
	t.Parallel()
	p := newPipeline()
	p.queue.fail = errors.New("redis down")
	res, err := p.ingest.Publish(context.Background(), domain.NewEventInput{Type: "a", Data: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatalf("publish failed although the event was committed: %v", err)
	}
	if res.EnqueueErr == nil {
		t.Error("EnqueueErr not set")
	}
	if _, err := p.store.GetEvent(context.Background(), res.Event.ID); err != nil {
		t.Errorf("event not durable: %v", err)
	}
}

func TestPublishRefusesBadInputAndStoresNothing(t *testing.T) {
	t.Parallel()
	p := newPipeline()
	for _, in := range []domain.NewEventInput{
		{Type: "", Data: json.RawMessage(`{}`)},
		{Type: "bad type", Data: json.RawMessage(`{}`)},
		{Type: "a", Data: json.RawMessage(`[1]`)},
		{Type: "a", Data: json.RawMessage(`"s"`)},
	} {
		_, err := p.ingest.Publish(context.Background(), in)
		var invalid *domain.ValidationError
		if !errors.As(err, &invalid) {
			t.Errorf("Publish(%+v) = %v, want a ValidationError", in, err)
		}
	}
	if n := len(p.queue.bodies(ports.EventStream)); n != 0 {
		t.Errorf("%d events enqueued, want none", n)
	}
}

func TestFanOutCreatesOneDeliveryPerMatchingSubscription(t *testing.T) {
	t.Parallel()
	p := newPipeline()
	ctx := context.Background()
	exact := p.subscribe(t, "order.created")
	wildcard := p.subscribe(t, "order.*")
	p.subscribe(t, "invoice.paid")
	all := p.subscribe(t, "*")
	ev := p.publish(t, "order.created", "")
	lonely := p.publish(t, "nobody.listens", "")

	if err := p.fanout.Handle(ctx, []string{ev.ID, lonely.ID}); err != nil {
		t.Fatal(err)
	}
	view, err := p.events.Get(ctx, ev.ID, ports.Page{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, d := range view.Deliveries {
		got[d.SubscriptionID] = true
	}
	if len(got) != 3 || !got[exact.ID] || !got[wildcard.ID] || !got[all.ID] {
		t.Errorf("deliveries go to %v, want exactly %s, %s, %s", got, exact.ID, wildcard.ID, all.ID)
	}
	// The catch-all subscription matches the lonely event too.
	if n := len(p.queue.bodies(ports.DeliveryStream)); n != 4 {
		t.Errorf("%d deliveries enqueued, want 4", n)
	}

	// Fanning out again (a redelivered stream entry) creates nothing.
	if err := p.fanout.Handle(ctx, []string{ev.ID}); err != nil {
		t.Fatal(err)
	}
	if n := len(p.queue.bodies(ports.DeliveryStream)); n != 4 {
		t.Errorf("%d deliveries enqueued after a repeat, want still 4", n)
	}
}

func TestFanOutWithoutSubscribersMarksTheEventDelivered(t *testing.T) {
	t.Parallel()
	p := newPipeline()
	ev := p.publish(t, "nobody.listens", "")
	if err := p.fanout.Handle(context.Background(), []string{ev.ID}); err != nil {
		t.Fatal(err)
	}
	got, _ := p.store.GetEvent(context.Background(), ev.ID)
	if got.Status != domain.EventDelivered {
		t.Errorf("status = %s, want delivered", got.Status)
	}
}

func TestFanOutDefersWhenTheQueueFails(t *testing.T) {
	t.Parallel()
	p := newPipeline()
	p.subscribe(t, "*")
	ev := p.publish(t, "a", "")
	p.queue.fail = errors.New("redis down")
	err := p.fanout.Handle(context.Background(), []string{ev.ID})
	if !errors.Is(err, application.ErrEnqueueDeferred) {
		t.Fatalf("err = %v, want ErrEnqueueDeferred", err)
	}
	view, _ := p.events.Get(context.Background(), ev.ID, ports.Page{Limit: 100})
	if len(view.Deliveries) != 1 {
		t.Errorf("%d deliveries committed, want 1", len(view.Deliveries))
	}
}

// handle hands the worker delivery id's latest entry in the delivery
// stream, as the queue would: the fan-out's fresh entry until something
// appends a plain one (a plain id if nothing did).
func (p *pipeline) handle(ctx context.Context, id string) (application.Attempted, error) {
	body := id
	for _, b := range p.queue.bodies(ports.DeliveryStream) {
		if named, _ := application.DeliveryEntry(b); named == id {
			body = b
		}
	}
	return p.deliver.Handle(ctx, body)
}

// fannedOut publishes one event to one subscription and fans it out,
// returning the delivery id.
func (p *pipeline) fannedOut(t *testing.T, sub domain.Subscription) (domain.Event, string) {
	t.Helper()
	ev := p.publish(t, sub.EventTypes[0], "")
	if err := p.fanout.Handle(context.Background(), []string{ev.ID}); err != nil {
		t.Fatal(err)
	}
	view, _ := p.events.Get(context.Background(), ev.ID, ports.Page{Limit: 100})
	if len(view.Deliveries) != 1 {
		t.Fatalf("%d deliveries, want 1", len(view.Deliveries))
	}
	return ev, view.Deliveries[0].ID
}

func TestDeliverSignsAndRecordsSuccess(t *testing.T) {
	t.Parallel()
	p := newPipeline()
	ctx := context.Background()
	sub := p.subscribe(t, "order.created")
	ev, id := p.fannedOut(t, sub)
	p.sender.script = []sendResult{answer(200)}

	res, err := p.handle(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if res.Skipped || res.Delivery.Status != domain.DeliveryDelivered || res.Attempt.Number != 1 {
		t.Fatalf("result = %+v, want delivered on attempt 1", res)
	}
	req := p.sender.requests[0]
	if req.URL != sub.URL || req.Timeout != sub.Timeout {
		t.Errorf("request to %s with timeout %s, want %s and %s", req.URL, req.Timeout, sub.URL, sub.Timeout)
	}
	if string(req.Body) != string(ev.WebhookPayload()) {
		t.Errorf("body = %s, want %s", req.Body, ev.WebhookPayload())
	}
	if req.Header.Get("Webhook-Id") != ev.ID || req.Header.Get("Content-Type") != "application/json" || req.Header.Get("User-Agent") != "Dispatch/test" {
		t.Errorf("headers = %v", req.Header)
	}
	ts, _ := strconv.ParseInt(req.Header.Get("Webhook-Timestamp"), 10, 64)
	if err := domain.Verify([]domain.Secret{sub.Secret}, ev.ID, req.Header.Get("Webhook-Timestamp"), req.Body,
		req.Header.Get("Webhook-Signature"), time.Unix(ts, 0), time.Minute); err != nil {
		t.Errorf("signature does not verify: %v", err)
	}
	view, _ := p.events.Get(ctx, ev.ID, ports.Page{Limit: 100})
	if view.Event.Status != domain.EventDelivered {
		t.Errorf("event status = %s, want delivered", view.Event.Status)
	}
	attempts, _ := p.events.Attempts(ctx, ev.ID, ports.AttemptPage{Limit: 100})
	if len(attempts) != 1 || attempts[0].StatusCode != 200 {
		t.Errorf("attempts = %+v, want one 200", attempts)
	}

	// A second copy of the stream entry finds nothing to do.
	again, err := p.handle(ctx, id)
	if err != nil || !again.Skipped {
		t.Errorf("second Handle = %+v, %v; want skipped", again, err)
	}
}

func TestDeliverRetriesThenDeadLetters(t *testing.T) {
	t.Parallel()
	p := newPipeline()
	ctx := context.Background()
	sub := p.subscribe(t, "a")
	ev, id := p.fannedOut(t, sub)
	p.sender.script = []sendResult{answer(500), {err: errors.New("connection refused")}, answer(503), answer(500), answer(500)}

	for attempt := 1; attempt <= 5; attempt++ {
		res, err := p.handle(ctx, id)
		if err != nil || res.Skipped {
			t.Fatalf("attempt %d: %+v, %v", attempt, res, err)
		}
		want := domain.DeliveryRetrying
		if attempt == 5 {
			want = domain.DeliveryDead
		}
		if res.Delivery.Status != want || res.Delivery.Attempts != attempt {
			t.Fatalf("after attempt %d: status %s attempts %d, want %s", attempt, res.Delivery.Status, res.Delivery.Attempts, want)
		}
		if want == domain.DeliveryRetrying {
			// Not due yet: a stray entry must not cause an early attempt.
			if early, _ := p.handle(ctx, id); !early.Skipped {
				t.Fatalf("attempt %d: delivered before it was due", attempt)
			}
			p.clock.Advance(res.Delivery.NextAttemptAt.Sub(p.clock.Now()))
		}
	}
	view, _ := p.events.Get(ctx, ev.ID, ports.Page{Limit: 100})
	if view.Event.Status != domain.EventFailed {
		t.Errorf("event status = %s, want failed", view.Event.Status)
	}
}

func TestDeliverDisablesTheSubscriptionOnGone(t *testing.T) {
	t.Parallel()
	p := newPipeline()
	ctx := context.Background()
	sub := p.subscribe(t, "a")
	_, id := p.fannedOut(t, sub)
	p.sender.script = []sendResult{answer(410)}
	res, err := p.handle(ctx, id)
	if err != nil || res.Delivery.Status != domain.DeliveryDead {
		t.Fatalf("result = %+v, %v; want dead", res, err)
	}
	got, _ := p.subs.Get(ctx, sub.ID)
	if got.Active || got.DisabledReason != domain.DisabledGone {
		t.Errorf("subscription active=%v reason=%q, want inactive, gone", got.Active, got.DisabledReason)
	}
}

func TestDeliverUnknownDeliveryIsSkipped(t *testing.T) {
	t.Parallel()
	p := newPipeline()
	res, err := p.deliver.Handle(context.Background(), "dlv_missing")
	if err != nil || !res.Skipped {
		t.Errorf("Handle(missing) = %+v, %v; want skipped", res, err)
	}
}

// TestAFreshDeliveryIsReservedToItsCreatorsEntry: the fan-out reserves a
// new delivery to the holder of the entry it appends, so a plain entry for
// it (the scheduler's, a reclaimed one) finds it taken, while the fresh
// entry's holder attempts it without a claim; after its outcome, plain
// entries claim it as before.
func TestAFreshDeliveryIsReservedToItsCreatorsEntry(t *testing.T) {
	t.Parallel()
	p := newPipeline()
	ctx := context.Background()
	sub := p.subscribe(t, "a")
	_, id := p.fannedOut(t, sub)
	p.sender.script = []sendResult{answer(500), answer(200)}

	plain, err := p.deliver.Handle(ctx, id)
	if err != nil || !plain.Skipped || len(p.sender.requests) != 0 {
		t.Fatalf("plain entry: %+v, %v, %d requests; want skipped without a request: reserved", plain, err, len(p.sender.requests))
	}
	res, err := p.handle(ctx, id) // the fan-out's fresh entry
	if err != nil || res.Skipped || res.Delivery.Status != domain.DeliveryRetrying {
		t.Fatalf("fresh entry: %+v, %v; want one attempt, retrying", res, err)
	}
	p.clock.Advance(res.Delivery.NextAttemptAt.Sub(p.clock.Now()))
	retried, err := p.deliver.Handle(ctx, id)
	if err != nil || retried.Delivery.Status != domain.DeliveryDelivered || retried.Attempt.Number != 2 {
		t.Errorf("plain entry for the retry: %+v, %v; want delivered on attempt 2", retried, err)
	}
}

// TestAnOrderedDeliveryIsNotReserved: an ordered delivery must be claimed,
// which checks that it is first in line, so the fan-out does not reserve it.
func TestAnOrderedDeliveryIsNotReserved(t *testing.T) {
	t.Parallel()
	p := newPipeline()
	ctx := context.Background()
	sub, err := p.subs.Create(ctx, domain.NewSubscriptionInput{URL: "https://example.com/hook", EventTypes: []string{"a"}, OrderingKey: "/data/n"})
	if err != nil {
		t.Fatal(err)
	}
	_, id := p.fannedOut(t, sub)
	p.sender.script = []sendResult{answer(200)}
	res, err := p.deliver.Handle(ctx, id)
	if err != nil || res.Delivery.Status != domain.DeliveryDelivered {
		t.Errorf("plain entry: %+v, %v; want delivered: nothing reserved it", res, err)
	}
}

// TestAReservationLastsTheVisibilityTimeout: a delivery whose fresh entry
// was lost is claimable by the scheduler's entry once the visibility
// timeout has passed, no later than without the reservation.
func TestAReservationLastsTheVisibilityTimeout(t *testing.T) {
	t.Parallel()
	p := newPipeline()
	p.fanout.VisibilityTimeout = 20 * time.Second
	ctx := context.Background()
	sub := p.subscribe(t, "a")
	_, id := p.fannedOut(t, sub)
	p.sender.script = []sendResult{answer(200)}

	p.clock.Advance(20*time.Second - time.Microsecond)
	if res, err := p.deliver.Handle(ctx, id); err != nil || !res.Skipped {
		t.Fatalf("plain entry within the reservation: %+v, %v; want skipped", res, err)
	}
	p.clock.Advance(time.Microsecond)
	if res, err := p.deliver.Handle(ctx, id); err != nil || res.Delivery.Status != domain.DeliveryDelivered {
		t.Errorf("plain entry once the reservation ended: %+v, %v; want delivered", res, err)
	}
}
