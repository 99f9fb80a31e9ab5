package application

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// leaseMargin is how much longer than its subscription's timeout a claimed
// delivery belongs to its worker: time to record the outcome. If the worker
// dies, the scheduler's scan finds the delivery due again once the lease has
// passed.
const leaseMargin = 5 * time.Second

// Deliver makes one attempt of a delivery: claim it, sign and POST the
// webhook, classify the answer and record the attempt and the outcome.
type Deliver struct {
	Deliveries    ports.DeliveryStore
	Subscriptions ports.SubscriptionStore
	Sender        ports.Sender
	Clock         ports.Clock
	// Random returns a number in [0, 1) for retry jitter.
	Random func() float64
	// UserAgent is sent on every request, e.g. "Dispatch/1.0.0".
	UserAgent string
}

// Attempted reports what Handle did, for metrics and logs.
type Attempted struct {
	// Skipped is true when no request was made: the delivery is gone,
	// terminal, not yet due, held by another worker, or was dead-lettered
	// because its subscription is disabled.
	Skipped  bool
	Delivery domain.Delivery
	Attempt  domain.Attempt
	Outcome  domain.Outcome
	// EventCreatedAt is when the event was accepted, for end-to-end latency.
	EventCreatedAt time.Time
}

// Handle attempts delivery id. An error means the outcome could not be
// recorded; the stream entry must then stay unacknowledged so it is retried.
func (uc *Deliver) Handle(ctx context.Context, id string) (Attempted, error) {
	now := uc.Clock.Now()
	claimed, err := uc.Deliveries.ClaimDelivery(ctx, id, now, leaseMargin)
	if errors.Is(err, domain.ErrNotFound) || errors.Is(err, domain.ErrConflict) {
		return Attempted{Skipped: true}, nil
	}
	if err != nil {
		return Attempted{}, fmt.Errorf("claim delivery %s: %w", id, err)
	}
	d, ev, sub := claimed.Delivery, claimed.Event, claimed.Subscription

	if !sub.Active {
		// No request is made, so no attempt is recorded.
		d.Status, d.LastError, d.Reason, d.UpdatedAt = domain.DeliveryDead, "subscription is disabled", "", now
		if err := uc.Deliveries.ReleaseDelivery(context.WithoutCancel(ctx), d); err != nil {
			return Attempted{}, fmt.Errorf("dead-letter delivery %s of disabled subscription: %w", d.ID, err)
		}
		return Attempted{Skipped: true, Delivery: d, EventCreatedAt: ev.CreatedAt}, nil
	}

	var out domain.Outcome
	res, err := uc.Sender.Send(ctx, uc.request(ev, sub, now))
	if err != nil {
		out = domain.ClassifyError(err)
	} else {
		out = domain.ClassifyResponse(res.StatusCode, res.RetryAfter, uc.Clock.Now())
	}

	finished := uc.Clock.Now()
	next := d.Attempted(out, sub.RetryPolicy, finished, uc.Random)
	next.LastStatusCode = res.StatusCode
	next.LastError = ""
	if out.Kind != domain.OutcomeSuccess {
		next.LastError = out.Reason
	}
	attempt := domain.Attempt{
		DeliveryID:     d.ID,
		SubscriptionID: d.SubscriptionID,
		Number:         next.Attempts,
		StatusCode:     res.StatusCode,
		ResponseBody:   string(res.Body),
		Error:          next.LastError,
		Duration:       res.Duration,
		CreatedAt:      finished,
	}
	// Recording must not be cut short by the caller's shutdown: the
	// endpoint has already seen the request.
	recordCtx := context.WithoutCancel(ctx)
	if err := uc.Deliveries.RecordAttempt(recordCtx, next, attempt); err != nil {
		return Attempted{}, fmt.Errorf("record attempt %d of delivery %s: %w", attempt.Number, d.ID, err)
	}
	if out.Kind == domain.OutcomeGone {
		_, err := uc.Subscriptions.UpdateSubscription(recordCtx, sub.ID, func(s *domain.Subscription) error {
			s.Active = false
			s.DisabledReason = domain.DisabledGone
			s.UpdatedAt = finished
			return nil
		})
		if err != nil && !errors.Is(err, domain.ErrNotFound) {
			return Attempted{}, fmt.Errorf("disable subscription %s after 410: %w", sub.ID, err)
		}
	}
	return Attempted{Delivery: next, Attempt: attempt, Outcome: out, EventCreatedAt: ev.CreatedAt}, nil
}

// request builds the signed webhook of SPEC §3.
func (uc *Deliver) request(ev domain.Event, sub domain.Subscription, now time.Time) ports.WebhookRequest {
	body := ev.WebhookPayload()
	h := make(http.Header, len(sub.Headers)+6)
	for name, value := range sub.Headers {
		h.Set(name, value)
	}
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", uc.UserAgent)
	h.Set("Webhook-Id", ev.ID)
	h.Set("Webhook-Timestamp", strconv.FormatInt(now.Unix(), 10))
	h.Set("Webhook-Signature", domain.Sign(sub.SigningSecrets(now), ev.ID, now, body))
	return ports.WebhookRequest{URL: sub.URL, Header: h, Body: body, Timeout: sub.Timeout}
}
