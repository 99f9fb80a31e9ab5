package httpapi_test

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// eventWithDeliveries publishes an event and fans it out to subs new
// subscriptions, each delivery settled by one attempt: delivered, but the
// delivery to the subscription with the highest id, which is dead. It
// returns the event id and the subscription ids in order.
func (s *server) eventWithDeliveries(t *testing.T, subs int) (string, []string) {
	t.Helper()
	ctx := context.Background()
	var subIDs []string
	for range subs {
		_, sub := s.do(t, "POST", "/v1/subscriptions", `{"url":"https://example.com/hook","event_types":["a"]}`)
		subIDs = append(subIDs, sub["id"].(string))
	}
	_, ev := s.do(t, "POST", "/v1/events", `{"type":"a","source":"s","data":{}}`)
	eventID := ev["id"].(string)
	now := time.Now()
	fo := ports.FanOut{EventID: eventID}
	for _, sub := range subIDs {
		fo.Deliveries = append(fo.Deliveries, domain.Delivery{
			ID: domain.MustNewID(domain.DeliveryIDPrefix, now), EventID: eventID, SubscriptionID: sub,
			Status: domain.DeliveryPending, NextAttemptAt: now, CreatedAt: now, UpdatedAt: now,
		})
	}
	if _, err := s.store.CreateDeliveries(ctx, []ports.FanOut{fo}); err != nil {
		t.Fatal(err)
	}
	slices.Sort(subIDs)
	for _, d := range fo.Deliveries {
		claimed, err := s.store.ClaimDelivery(ctx, d.ID, now, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		d = claimed.Delivery
		d.Attempts, d.Status, d.LastStatusCode, d.UpdatedAt = 1, domain.DeliveryDelivered, 200, now
		if d.SubscriptionID == subIDs[len(subIDs)-1] {
			d.Status, d.LastStatusCode = domain.DeliveryDead, 400
		}
		a := domain.Attempt{DeliveryID: d.ID, Number: 1, StatusCode: d.LastStatusCode, CreatedAt: now}
		if _, err := s.store.RecordAttempt(ctx, d, a); err != nil {
			t.Fatal(err)
		}
	}
	return eventID, subIDs
}

// TestEventDeliveriesComeInPages: GET /v1/events/{id} answered every
// delivery of the event at once, so an event fanned out to 50,000
// subscriptions was one 50,000-row answer.
func TestEventDeliveriesComeInPages(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	eventID, subIDs := s.eventWithDeliveries(t, 5)

	var seen []string
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("pagination does not end")
		}
		res, page := s.do(t, "GET", "/v1/events/"+eventID+"?limit=2&cursor="+url.QueryEscape(cursor), "")
		if res.StatusCode != 200 {
			t.Fatalf("page %d: status %d: %v", pages, res.StatusCode, page)
		}
		if page["status"] != "failed" {
			t.Errorf("page %d: status %v, want failed: the dead delivery is on the last page, the status covers it", pages, page["status"])
		}
		deliveries := page["deliveries"].([]any)
		if len(deliveries) > 2 {
			t.Fatalf("page %d has %d deliveries, limit 2", pages, len(deliveries))
		}
		for _, d := range deliveries {
			seen = append(seen, d.(map[string]any)["subscription_id"].(string))
		}
		next, ok := page["deliveries_next_cursor"].(string)
		if !ok {
			if v, present := page["deliveries_next_cursor"]; !present || v != nil {
				t.Fatalf("deliveries_next_cursor = %v (present %v), want null on the last page", v, present)
			}
			break
		}
		cursor = next
	}
	if fmt.Sprint(seen) != fmt.Sprint(subIDs) {
		t.Errorf("pages gave the deliveries of %v, want %v", seen, subIDs)
	}

	_, page := s.do(t, "GET", "/v1/events/"+eventID, "")
	if got := len(page["deliveries"].([]any)); got != 5 {
		t.Errorf("default page has %d deliveries, want all 5", got)
	}
}

// TestEventAttemptsComeInPages: GET /v1/events/{id}/attempts answered
// every attempt of every delivery at once.
func TestEventAttemptsComeInPages(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	eventID, subIDs := s.eventWithDeliveries(t, 5)

	var seen []string
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("pagination does not end")
		}
		res, page := s.do(t, "GET", "/v1/events/"+eventID+"/attempts?limit=2&cursor="+url.QueryEscape(cursor), "")
		if res.StatusCode != 200 {
			t.Fatalf("page %d: status %d: %v", pages, res.StatusCode, page)
		}
		data := page["data"].([]any)
		if len(data) > 2 {
			t.Fatalf("page %d has %d attempts, limit 2", pages, len(data))
		}
		for _, a := range data {
			seen = append(seen, a.(map[string]any)["subscription_id"].(string))
		}
		next, ok := page["next_cursor"].(string)
		if !ok {
			break
		}
		cursor = next
	}
	if fmt.Sprint(seen) != fmt.Sprint(subIDs) {
		t.Errorf("pages gave the attempts of %v, want one of each of %v in order", seen, subIDs)
	}
}

func TestEventPagesRefuseBadCursorsAndLimits(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	eventID, _ := s.eventWithDeliveries(t, 3)
	_, first := s.do(t, "GET", "/v1/events/"+eventID+"?limit=1", "")
	deliveriesCursor, _ := first["deliveries_next_cursor"].(string)
	for _, tc := range []struct {
		name, path string
		status     int
	}{
		{"event: not a cursor", "/v1/events/" + eventID + "?cursor=not-a-cursor", 400},
		{"event: limit too large", "/v1/events/" + eventID + "?limit=100000", 422},
		{"event: limit zero", "/v1/events/" + eventID + "?limit=0", 422},
		{"attempts: not a cursor", "/v1/events/" + eventID + "/attempts?cursor=not-a-cursor", 400},
		{"attempts: a deliveries cursor", "/v1/events/" + eventID + "/attempts?cursor=" + deliveriesCursor, 400},
		{"attempts: limit too large", "/v1/events/" + eventID + "/attempts?limit=100000", 422},
	} {
		res, body := s.do(t, "GET", tc.path, "")
		if res.StatusCode != tc.status {
			t.Errorf("%s: status %d, want %d: %v", tc.name, res.StatusCode, tc.status, body)
		}
	}
}

// TestAnInterruptedDeleteHidesTheSubscriptionAndDeleteFinishesIt: a
// deletion that stopped after its first batch (the process died) leaves
// the subscription gone to every read, and deleting it again finishes it.
func TestAnInterruptedDeleteHidesTheSubscriptionAndDeleteFinishesIt(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	_, subIDs := s.eventWithDeliveries(t, 1)
	sub := subIDs[0]
	_, ev := s.do(t, "POST", "/v1/events", `{"type":"a","source":"s","data":{}}`)
	now := time.Now()
	second := domain.Delivery{
		ID: domain.MustNewID(domain.DeliveryIDPrefix, now), EventID: ev["id"].(string), SubscriptionID: sub,
		Status: domain.DeliveryPending, NextAttemptAt: now, CreatedAt: now, UpdatedAt: now,
	}
	if _, err := s.store.CreateDeliveries(context.Background(), []ports.FanOut{{EventID: second.EventID, Deliveries: []domain.Delivery{second}}}); err != nil {
		t.Fatal(err)
	}
	done, err := s.store.DeleteSubscription(context.Background(), sub, 1)
	if err != nil || done {
		t.Fatalf("first batch: done %v, err %v; want an unfinished deletion", done, err)
	}
	for _, tc := range []struct{ method, path, body string }{
		{"GET", "/v1/subscriptions/" + sub, ""},
		{"GET", "/v1/subscriptions/" + sub + "/secret", ""},
		{"PATCH", "/v1/subscriptions/" + sub, `{"description":"back"}`},
		{"POST", "/v1/subscriptions/" + sub + "/recover", `{"since":"2020-01-01T00:00:00Z"}`},
	} {
		if res, body := s.do(t, tc.method, tc.path, tc.body); res.StatusCode != 404 {
			t.Errorf("%s %s during the deletion: %d %v, want 404", tc.method, tc.path, res.StatusCode, body)
		}
	}
	if res, _ := s.do(t, "DELETE", "/v1/subscriptions/"+sub, ""); res.StatusCode != 204 {
		t.Errorf("delete resuming the deletion: %d, want 204", res.StatusCode)
	}
	if res, _ := s.do(t, "DELETE", "/v1/subscriptions/"+sub, ""); res.StatusCode != 404 {
		t.Errorf("delete once deleted: %d, want 404", res.StatusCode)
	}
}
