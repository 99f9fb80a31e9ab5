package bootstrap_test

import (
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/dispatch-webhooks/dispatch/bootstrap"
	"github.com/dispatch-webhooks/dispatch/client"
)

// fastRetries retries quickly so scenarios finish in seconds.
var fastRetries = &client.RetryPolicy{InitialInterval: new("100ms"), Multiplier: new(1.5), MaxAttempts: new(int64(5))}

// TestDeliverySemantics drives the retry, dead-letter and replay rules of
// SPEC §3 through the HTTP API against scripted endpoints, with two worker
// and two scheduler replicas sharing the work.
func TestDeliverySemantics(t *testing.T) {
	t.Parallel()
	c := newCluster(t, nil)
	c.start(bootstrap.RoleWorker)
	c.start(bootstrap.RoleWorker)
	c.start(bootstrap.RoleScheduler)
	c.start(bootstrap.RoleScheduler)
	rcv := newScripted(t)

	t.Run("server errors then success: delivered on attempt 3 with one webhook-id", func(t *testing.T) {
		t.Parallel()
		ep, url := rcv.add("/flaky", sequence(500, 503))
		_, secret := c.subscribe(url, "flaky.happened", client.SubscriptionInput{RetryPolicy: fastRetries})
		ep.setSecret(secret)
		id := c.publish("flaky.happened", `{"n":1}`)
		ev := c.waitEvent(id, "delivered", 15*time.Second)
		if d := ev.Deliveries[0]; d.Attempts != 3 || d.Status != "delivered" {
			t.Errorf("delivery = %+v, want delivered on attempt 3", d)
		}
		got := ep.got()
		if len(got) != 3 {
			t.Fatalf("endpoint got %d requests, want 3", len(got))
		}
		for i, a := range got {
			if a.webhookID != id || a.verifyErr != nil || a.body != got[0].body {
				t.Errorf("request %d: webhook-id %q (want %s), verify %v, body changed %v", i+1, a.webhookID, id, a.verifyErr, a.body != got[0].body)
			}
		}
		assertAttemptNumbers(t, c.attempts(id), 500, 503, 200)
	})

	t.Run("429 with Retry-After 2 waits at least 2s", func(t *testing.T) {
		t.Parallel()
		ep, url := rcv.add("/throttled", func(n int, _ *http.Request) (int, http.Header) {
			if n == 0 {
				return http.StatusTooManyRequests, http.Header{"Retry-After": {"2"}}
			}
			return http.StatusOK, nil
		})
		c.subscribe(url, "throttled.happened", client.SubscriptionInput{RetryPolicy: fastRetries})
		id := c.publish("throttled.happened", `{}`)
		c.waitEvent(id, "delivered", 15*time.Second)
		got := ep.got()
		if len(got) != 2 {
			t.Fatalf("endpoint got %d requests, want 2", len(got))
		}
		if gap := got[1].at.Sub(got[0].at); gap < 2*time.Second {
			t.Errorf("second attempt came %s after the first, want at least 2s (Retry-After)", gap)
		}
	})

	t.Run("400 dead-letters at once; manual retry delivers", func(t *testing.T) {
		t.Parallel()
		ep, url := rcv.add("/rejecting", sequence(400))
		c.subscribe(url, "rejected.happened", client.SubscriptionInput{RetryPolicy: fastRetries})
		id := c.publish("rejected.happened", `{}`)
		ev := c.waitEvent(id, "failed", 15*time.Second)
		d := ev.Deliveries[0]
		if d.Status != "dead" || d.Attempts != 1 {
			t.Fatalf("delivery = %+v, want dead after 1 attempt", d)
		}
		listed, err := c.api.ListDeliveriesWithResponse(t.Context(), &client.ListDeliveriesParams{
			Status: new(client.ListDeliveriesParamsStatusDead), EventId: &id,
		})
		dead := deref(body(t, "list dead deliveries", expect(t, "list dead deliveries", listed, err, http.StatusOK).JSON200).Data)
		if len(dead) != 1 || dead[0].Id != d.Id {
			t.Errorf("dead letters of the event = %+v, want [%s]", dead, d.Id)
		}
		res, err := c.api.RetryDeliveryWithResponse(t.Context(), d.Id)
		retried := body(t, "retry delivery", expect(t, "retry delivery", res, err, http.StatusAccepted).JSON202)
		if retried.Status != "retrying" {
			t.Errorf("retry answered status %q, want retrying", retried.Status)
		}
		c.waitEvent(id, "delivered", 15*time.Second)
		if n := len(ep.got()); n != 2 {
			t.Errorf("endpoint got %d requests, want 2", n)
		}
		got, err := c.api.GetDeliveryWithResponse(t.Context(), d.Id)
		one := body(t, "get delivery", expect(t, "get delivery", got, err, http.StatusOK).JSON200)
		if one.Status != "delivered" || len(deref(one.AttemptLog)) != 2 {
			t.Errorf("delivery = %s with %d attempts, want delivered with 2", one.Status, len(deref(one.AttemptLog)))
		}
		// A delivered delivery cannot be retried.
		res, err = c.api.RetryDeliveryWithResponse(t.Context(), d.Id)
		expect(t, "retry a delivered delivery", res, err, http.StatusConflict)
	})

	t.Run("410 disables the subscription, which is skipped afterwards", func(t *testing.T) {
		t.Parallel()
		ep, url := rcv.add("/gone", sequence(410))
		subID, _ := c.subscribe(url, "gone.happened", client.SubscriptionInput{RetryPolicy: fastRetries})
		first := c.publish("gone.happened", `{}`)
		c.waitEvent(first, "failed", 15*time.Second)
		res, err := c.api.GetSubscriptionWithResponse(t.Context(), subID)
		sub := body(t, "get subscription", expect(t, "get subscription", res, err, http.StatusOK).JSON200)
		if sub.Active || sub.DisabledReason == nil || *sub.DisabledReason != "gone" {
			t.Errorf("subscription active=%v reason=%v, want inactive, gone", sub.Active, sub.DisabledReason)
		}
		second := c.publish("gone.happened", `{}`)
		ev := c.waitEvent(second, "delivered", 15*time.Second) // nothing to deliver
		if len(ev.Deliveries) != 0 {
			t.Errorf("a disabled subscription got %d deliveries", len(ev.Deliveries))
		}
		if n := len(ep.got()); n != 1 {
			t.Errorf("endpoint got %d requests, want 1", n)
		}
	})

	t.Run("always 500 with max_attempts 3 is dead after exactly 3", func(t *testing.T) {
		t.Parallel()
		ep, url := rcv.add("/broken", func(int, *http.Request) (int, http.Header) { return 500, nil })
		c.subscribe(url, "broken.happened", client.SubscriptionInput{RetryPolicy: &client.RetryPolicy{InitialInterval: new("50ms"), MaxAttempts: new(int64(3))}})
		id := c.publish("broken.happened", `{}`)
		ev := c.waitEvent(id, "failed", 15*time.Second)
		if d := ev.Deliveries[0]; d.Status != "dead" || d.Attempts != 3 {
			t.Errorf("delivery = %+v, want dead after 3 attempts", d)
		}
		assertAttemptNumbers(t, c.attempts(id), 500, 500, 500)
		if n := len(ep.got()); n != 3 {
			t.Errorf("endpoint got %d requests, want 3", n)
		}
	})

	t.Run("schedule policy is honoured", func(t *testing.T) {
		t.Parallel()
		ep, url := rcv.add("/scheduled", sequence(500, 500))
		c.subscribe(url, "scheduled.happened", client.SubscriptionInput{RetryPolicy: &client.RetryPolicy{
			Strategy: new(client.RetryPolicyStrategySchedule), Schedule: &[]string{"300ms", "700ms"}}})
		id := c.publish("scheduled.happened", `{}`)
		c.waitEvent(id, "delivered", 15*time.Second)
		got := ep.got()
		if len(got) != 3 {
			t.Fatalf("endpoint got %d requests, want 3", len(got))
		}
		if gap := got[1].at.Sub(got[0].at); gap < 300*time.Millisecond {
			t.Errorf("attempt 2 came %s after attempt 1, want ≥ 300ms", gap)
		}
		if gap := got[2].at.Sub(got[1].at); gap < 700*time.Millisecond {
			t.Errorf("attempt 3 came %s after attempt 2, want ≥ 700ms", gap)
		}
	})

	t.Run("recover re-delivers a subscription's dead deliveries", func(t *testing.T) {
		t.Parallel()
		healthy := false
		var mu sync.Mutex
		ep, url := rcv.add("/recovering", func(int, *http.Request) (int, http.Header) {
			mu.Lock()
			defer mu.Unlock()
			if healthy {
				return 200, nil
			}
			return 400, nil
		})
		subID, _ := c.subscribe(url, "recovering.happened", client.SubscriptionInput{})
		since := time.Now().Add(-time.Minute)
		ids := []string{c.publish("recovering.happened", `{"n":1}`), c.publish("recovering.happened", `{"n":2}`)}
		for _, id := range ids {
			c.waitEvent(id, "failed", 15*time.Second)
		}
		mu.Lock()
		healthy = true
		mu.Unlock()
		recovered, err := c.api.RecoverSubscriptionWithResponse(t.Context(), subID, client.RecoverInputBody{Since: since})
		res := body(t, "recover subscription", expect(t, "recover subscription", recovered, err, http.StatusAccepted).JSON202)
		if res.Count != 2 {
			t.Errorf("recover count = %d, want 2", res.Count)
		}
		for _, id := range ids {
			c.waitEvent(id, "delivered", 15*time.Second)
		}
		if n := len(ep.got()); n != 4 {
			t.Errorf("endpoint got %d requests, want 4", n)
		}
	})

	t.Run("PATCH changes a subscription partially", func(t *testing.T) {
		t.Parallel()
		_, url := rcv.add("/patched", nil)
		subID, _ := c.subscribe(url, "patched.happened", client.SubscriptionInput{Description: new("before"), RateLimit: new(int64(10))})
		res, err := c.api.UpdateSubscriptionWithResponse(t.Context(), subID, client.SubscriptionPatch{Timeout: new("2s")})
		sub := body(t, "PATCH subscription", expect(t, "PATCH subscription", res, err, http.StatusOK).JSON200)
		if sub.Description != "before" || sub.RateLimit != 10 || sub.Timeout != "2s" {
			t.Errorf("after PATCH: %+v, want description and rate_limit kept, timeout 2s", sub)
		}
		res, err = c.api.UpdateSubscriptionWithResponse(t.Context(), subID, client.SubscriptionPatch{RateLimit: new(int64(-1))})
		expect(t, "PATCH rate_limit -1", res, err, http.StatusUnprocessableEntity)
		res, err = c.api.UpdateSubscriptionWithResponse(t.Context(), "sub_01M8000000000000000000000", client.SubscriptionPatch{Description: new("x")})
		expect(t, "PATCH a missing subscription", res, err, http.StatusNotFound)
	})
}

// assertAttemptNumbers checks that attempts are numbered 1..n once each and
// answered the given codes in order.
func assertAttemptNumbers(t *testing.T, attempts []client.Attempt, codes ...int) {
	t.Helper()
	if len(attempts) != len(codes) {
		t.Fatalf("%d attempts recorded, want %d: %+v", len(attempts), len(codes), attempts)
	}
	for i, a := range attempts {
		if a.Attempt != int64(i+1) || a.StatusCode == nil || *a.StatusCode != int64(codes[i]) {
			t.Errorf("attempt %d = %+v, want number %d answered %d", i+1, a, i+1, codes[i])
		}
	}
}

// TestIdempotentPublishUnderConcurrency sends 50 identical requests with one
// idempotency key at once: one event, one delivery per subscription.
func TestIdempotentPublishUnderConcurrency(t *testing.T) {
	t.Parallel()
	c := newCluster(t, nil)
	c.start(bootstrap.RoleWorker)
	c.start(bootstrap.RoleScheduler)
	rcv := newScripted(t)
	epA, urlA := rcv.add("/a", nil)
	epB, urlB := rcv.add("/b", nil)
	c.subscribe(urlA, "order.created", client.SubscriptionInput{})
	c.subscribe(urlB, "order.*", client.SubscriptionInput{})

	const n = 50
	ids := make([]string, n)
	statuses := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids[i], statuses[i] = publishWithKey(t, c.api, "order.created", `{"order":"o-1"}`, "same-key")
		}()
	}
	wg.Wait()
	created := 0
	for i := range n {
		if ids[i] != ids[0] {
			t.Fatalf("request %d got event %s, request 0 got %s", i, ids[i], ids[0])
		}
		switch statuses[i] {
		case http.StatusAccepted:
			created++
		case http.StatusOK:
		default:
			t.Errorf("request %d answered %d", i, statuses[i])
		}
	}
	if created != 1 {
		t.Errorf("%d requests answered 202, want exactly 1 (the rest 200 replays)", created)
	}
	ev := c.waitEvent(ids[0], "delivered", 15*time.Second)
	if len(ev.Deliveries) != 2 {
		t.Errorf("%d deliveries, want one per subscription (2)", len(ev.Deliveries))
	}
	if a, b := len(epA.got()), len(epB.got()); a != 1 || b != 1 {
		t.Errorf("endpoints got %d and %d requests, want 1 each", a, b)
	}
}

// publishWithKey publishes with an idempotency key and returns the event's
// id, from the 202 of a new event or the 200 of a replay, and the status.
// Safe from any goroutine.
func publishWithKey(t *testing.T, api *client.ClientWithResponses, eventType, data, key string) (id string, status int) {
	res, err := api.PublishEventWithResponse(t.Context(), &client.PublishEventParams{IdempotencyKey: &key},
		client.PublishBody{Type: eventType, Source: "test", Data: json.RawMessage(data)})
	if err != nil {
		t.Errorf("publish with key %s: %v", key, err)
		return "", 0
	}
	var ev *client.Event
	switch res.StatusCode() {
	case http.StatusAccepted:
		ev = res.JSON202
	case http.StatusOK:
		ev = res.JSON200
	}
	if ev == nil {
		if res.StatusCode()/100 == 2 {
			t.Errorf("publish with key %s answered %d, but no body was decoded: the OpenAPI document declares none", key, res.StatusCode())
		}
		return "", res.StatusCode()
	}
	return ev.Id, res.StatusCode()
}
