package application

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// leaseMargin is how much longer than its subscription's timeout a claimed
// delivery, and its concurrency slot, belong to their worker: time to record
// the outcome. If the worker dies, both come back once the lease has passed.
const leaseMargin = 5 * time.Second

// slotWait is how long a delivery that found every concurrency slot taken,
// or its subscription's share of the worker (requestShares), is postponed
// before it is tried again; a slot frees when a request in flight ends,
// which is usually sooner than a timeout.
const slotWait = 100 * time.Millisecond

// Deliver makes one attempt of a delivery: claim (or take) it; pass the
// endpoint's protections (circuit breaker, rate limit, concurrency cap),
// postponing it without an attempt when one says no; sign and POST the
// webhook; classify the answer; record the attempt and the outcome.
type Deliver struct {
	Deliveries    ports.DeliveryClaims
	Subscriptions ports.SubscriptionStore
	Sender        ports.Sender
	Queue         ports.Queue
	Clock         ports.Clock
	// Protection protects endpoints (circuit breaker, rate limit,
	// concurrency cap), shared by every worker; nil protects nothing.
	Protection ports.Protection
	// Local, when set, protects a delivery whose Protection failed, from
	// within this process only (reported in Attempted.Degraded): an
	// unreachable shared store must neither stop deliveries nor let them
	// all through unprotected. Without it such a delivery goes ahead
	// unprotected.
	Local ports.Protection
	// Breaker configures every subscription's circuit breaker.
	Breaker domain.BreakerConfig
	// Random returns a number in [0, 1) for retry jitter.
	Random func() float64
	// UserAgent is sent on every request, e.g. "Dispatch/1.0.0".
	UserAgent string
	// Requests, when set, bounds how many Handle calls are past their
	// start and short of their endpoint's answer at once: its capacity is
	// the bound. A call takes a slot before it claims its delivery and
	// gives it back as soon as the answer is in, so that recording an
	// outcome (a batched write that waits for others) does not keep the
	// next request waiting. The caller may then run more Handle calls at
	// once than Requests holds; the extra ones are recording outcomes or
	// waiting for a slot, and since they wait before their claim, no lease
	// runs while they do. Once its delivery is claimed, a call keeps its
	// slot only within its subscription's share of Requests (see
	// requestShares); over it, the delivery is postponed like one its
	// endpoint's concurrency cap refused.
	Requests chan struct{}
	// Report, when set, lets a delivery over its subscription's share of
	// Requests wait in the worker for a place (requestShares), and then
	// receives what became of it: Handle returns at once, reporting it
	// Parked. Without Report such a delivery is postponed at once.
	Report func(Attempted, error)

	// shares divides Requests among subscriptions (requestShares).
	shares requestShares
	// throttled paces this process's deliveries postponed by their
	// endpoint's rate limit, and overShare those postponed because their
	// subscription held its share of Requests.
	throttled, overShare turns
	// requeues counts the postponed deliveries waiting to be appended
	// again (requeueAt).
	requeues atomic.Int64
	// resumed tracks the parked deliveries being attempted (park).
	resumed sync.WaitGroup
}

// Attempted reports what Handle did, for metrics and logs.
type Attempted struct {
	// Skipped is true when no request was made: the delivery is gone,
	// terminal, not yet due, held back behind an earlier one, held by
	// another worker, postponed by a protection, or was dead-lettered
	// because its subscription is disabled.
	Skipped bool
	// Parked is true when the delivery waits in the worker for a place in
	// its subscription's share (Deliver.Report).
	Parked bool
	// Postponed names the protection that postponed the delivery
	// (domain.ReasonThrottled, domain.ReasonCircuitOpen), if one did.
	Postponed string
	Delivery  domain.Delivery
	Attempt   domain.Attempt
	Outcome   domain.Outcome
	// Breaker is the circuit's state after the attempt, when a breaker
	// recorded it.
	Breaker *domain.Breaker
	// EventCreatedAt is when the event was accepted, for end-to-end latency.
	EventCreatedAt time.Time
	// Degraded reports that Protection failed (its store was unreachable),
	// so the request was protected by Local only, or, without Local, not
	// at all.
	Degraded error
}

// Handle attempts the delivery a delivery stream entry names (its body: a
// delivery id, marked when the entry is fresh), which it takes under its
// creator's reservation when the entry is fresh (see entries.go) and
// claims otherwise. An error means the outcome could not be recorded; the
// stream entry must then stay unacknowledged so it is retried.
func (uc *Deliver) Handle(ctx context.Context, entry string) (Attempted, error) {
	id, fresh := DeliveryEntry(entry)
	slot := uc.takeRequestSlot()
	defer slot.release()
	now := uc.Clock.Now()
	var claimed ports.Claimed
	var err error
	if fresh {
		claimed, err = uc.Deliveries.TakeDelivery(ctx, freshDelivery(entry), now, leaseMargin)
	} else {
		claimed, err = uc.Deliveries.ClaimDelivery(ctx, id, now, leaseMargin)
	}
	if errors.Is(err, domain.ErrNotFound) || errors.Is(err, domain.ErrConflict) {
		return Attempted{Skipped: true}, nil
	}
	if err != nil {
		return Attempted{}, fmt.Errorf("claim delivery %s: %w", id, err)
	}
	d, ev, sub := claimed.Delivery, claimed.Event, claimed.Subscription
	// Whatever happens from here, the outcome must be stored even if the
	// caller is shutting down: the delivery is leased to this worker.
	keep := context.WithoutCancel(ctx)

	if !sub.Active {
		// No request is made, so no attempt is recorded.
		d.Status, d.LastError, d.Reason, d.UpdatedAt = domain.DeliveryDead, "subscription is disabled", "", now
		if err := uc.release(keep, d); err != nil {
			return Attempted{}, fmt.Errorf("dead-letter delivery %s of disabled subscription: %w", d.ID, err)
		}
		return Attempted{Skipped: true, Delivery: d, EventCreatedAt: ev.CreatedAt}, nil
	}

	report := Attempted{EventCreatedAt: ev.CreatedAt}
	if ok, every := slot.admit(sub, now); !ok {
		// Its endpoint already holds its share of this worker. It waits
		// in the worker for one of that endpoint's requests to end when
		// that is soon (park); otherwise it is postponed like a delivery
		// its concurrency cap refused, holding nothing of the worker while
		// it waits (neither a request slot nor its consumer's), and comes
		// back in turn, at the pace its endpoint's requests end: a hanging
		// endpoint's backlog then costs a claim per timeout or so, not one
		// every slotWait.
		if uc.park(keep, &slot, claimed, report, every) {
			report.Skipped, report.Parked = true, true
			return report, nil
		}
		until := uc.overShare.turn(sub.ID, now.Add(uc.slotWait()), now, every)
		return uc.postponed(keep, &slot, report, d, until, domain.ReasonThrottled, now)
	}
	return uc.attempt(ctx, keep, &slot, claimed, report, now)
}

// attempt makes the request of a claimed delivery admitted in its
// subscription's share of the worker (slot), unless a protection
// postpones it, and records the outcome.
func (uc *Deliver) attempt(ctx, keep context.Context, slot *requestSlot, claimed ports.Claimed, report Attempted, now time.Time) (Attempted, error) {
	d, ev, sub := claimed.Delivery, claimed.Event, claimed.Subscription
	until, reason, by, degraded := uc.protect(keep, d, sub, now)
	report.Degraded = degraded
	switch reason {
	case "":
	case domain.ReasonThrottled:
		// Due at its turn at the limit's pace, so that the deliveries the
		// limit refused come back one by one rather than all at once.
		until = uc.throttled.turn(sub.ID, until, now, time.Second/time.Duration(max(sub.RateLimit, 1)))
		return uc.postponed(keep, slot, report, d, until, reason, now)
	case reasonNoSlot:
		return uc.postponed(keep, slot, report, d, now.Add(uc.slotWait()), domain.ReasonThrottled, now)
	default:
		return uc.postponed(keep, slot, report, d, until, reason, now)
	}

	slot.sending()
	res, err := uc.Sender.Send(ctx, uc.request(ev, sub, now))
	slot.release()
	var out domain.Outcome
	if err != nil {
		out = domain.ClassifyError(err)
	} else {
		out = domain.ClassifyResponse(res.StatusCode, res.RetryAfter, uc.Clock.Now())
	}
	finished := uc.Clock.Now()

	// Only failures that say the endpoint is unwell count against it; a
	// 4xx is an answer from a healthy endpoint.
	state, recorded, err := uc.finish(keep, by, sub.ID, d.ID, out.Kind != domain.OutcomeRetryable, finished)
	if err != nil {
		report.Degraded = errors.Join(report.Degraded, fmt.Errorf("record breaker outcome: %w", err))
	} else if recorded {
		report.Breaker = &state
	}

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
	if out.Kind == domain.OutcomeGone {
		// Disabled before the attempt is stored, so whoever sees the
		// delivery dead (or its event failed) sees the subscription
		// disabled too. If the attempt is then lost, the delivery is
		// dead-lettered on its next claim: the subscription is disabled.
		_, err := uc.Subscriptions.UpdateSubscription(keep, sub.ID, func(s *domain.Subscription) error {
			s.Active = false
			s.DisabledReason = domain.DisabledGone
			s.UpdatedAt = finished
			return nil
		})
		if err != nil && !errors.Is(err, domain.ErrNotFound) {
			return Attempted{}, fmt.Errorf("disable subscription %s after 410: %w", sub.ID, err)
		}
	}
	inLine, err := uc.Deliveries.RecordAttempt(keep, next, attempt)
	if err != nil {
		return Attempted{}, fmt.Errorf("record attempt %d of delivery %s: %w", attempt.Number, d.ID, err)
	}
	uc.enqueue(keep, d.SubscriptionID, inLine)
	report.Delivery, report.Attempt, report.Outcome = next, attempt, out
	return report, nil
}

// park parks a claimed delivery over its subscription's share of Requests
// (requestShares.park), with its request slot given back, if Report is set
// and a place is likely to come within parkFor. A request of its
// subscription that ends hands it its place and slot; if none does within
// parkFor it is postponed, as it would have been at once. Either way
// Report learns what became of it. A parked delivery keeps its claim: if
// the worker stops meanwhile, it comes back when its lease ends.
func (uc *Deliver) park(keep context.Context, slot *requestSlot, claimed ports.Claimed, report Attempted, every time.Duration) bool {
	if uc.Report == nil || slot.slots == nil {
		return false
	}
	sub := claimed.Subscription
	p := &parked{}
	p.resume = func(handed requestSlot) {
		uc.resumed.Go(func() {
			defer handed.release()
			uc.Report(uc.attempt(keep, keep, &handed, claimed, report, uc.Clock.Now()))
		})
	}
	p.expire = func() {
		now := uc.Clock.Now()
		until := uc.overShare.turn(sub.ID, now.Add(uc.slotWait()), now, every)
		uc.Report(uc.postponed(keep, &requestSlot{}, report, claimed.Delivery, until, domain.ReasonThrottled, now))
	}
	if !uc.shares.park(sub.ID, sub.MaxInFlight, cap(slot.slots), every, p) {
		return false
	}
	slot.release()
	// Resumed by then, it is no longer parked, and this does nothing.
	time.AfterFunc(parkFor, func() {
		if uc.shares.unpark(sub.ID, p) {
			p.expire()
		}
	})
	return true
}

// Stop postpones the deliveries parked (see park) and waits for those
// resumed to be recorded, or for ctx to end. Call it once nothing calls
// Handle any more.
func (uc *Deliver) Stop(ctx context.Context) error {
	for _, p := range uc.shares.unparkAll() {
		p.expire()
	}
	done := make(chan struct{})
	go func() { uc.resumed.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("parked deliveries not recorded before the stop timeout: %w", ctx.Err())
	}
}

// requestSlot is a slot of Deliver.Requests, if one was taken, and once
// admitted, the share of the subscription its request counts in.
type requestSlot struct {
	slots  chan struct{}
	shares *requestShares
	clock  ports.Clock
	// sub is the share it counts in; sent, when its request went out.
	sub  string
	sent time.Time
}

// takeRequestSlot waits for a slot of Requests (at once without Requests).
func (uc *Deliver) takeRequestSlot() requestSlot {
	if uc.Requests == nil {
		return requestSlot{}
	}
	uc.Requests <- struct{}{}
	return requestSlot{slots: uc.Requests, shares: &uc.shares, clock: uc.Clock}
}

// admit counts the slot in sub's share of Requests (requestShares), unless
// sub holds its share already; then every is how often one of its
// requests may be expected to end. Without Requests there is nothing to
// share.
func (s *requestSlot) admit(sub domain.Subscription, now time.Time) (ok bool, every time.Duration) {
	if s.slots == nil {
		return true, 0
	}
	if ok, every = s.shares.take(sub.ID, sub.MaxInFlight, cap(s.slots), now); !ok {
		return false, every
	}
	s.sub = sub.ID
	return true, 0
}

// sending notes that the request goes out now, so that its share learns
// how long its requests take.
func (s *requestSlot) sending() {
	if s.clock != nil {
		s.sent = s.clock.Now()
	}
}

// release gives the slot back; after the first call it does nothing.
func (s *requestSlot) release() {
	if s.sub != "" {
		var took time.Duration
		if !s.sent.IsZero() {
			took = s.clock.Now().Sub(s.sent)
		}
		if next := s.shares.give(s.sub, took); next != nil {
			// The place and the slot are the parked delivery's now.
			next.resume(requestSlot{slots: s.slots, shares: s.shares, clock: s.clock, sub: s.sub})
			s.sub, s.slots = "", nil
			return
		}
		s.sub = ""
	}
	if s.slots != nil {
		<-s.slots
		s.slots = nil
	}
}

// reasonNoSlot is protect's reason when every concurrency slot was taken:
// Handle then postpones the delivery by slotWait, as throttled.
const reasonNoSlot = "no slot"

// protect asks Protection whether a request may go to sub now (the
// breaker, the rate limit and the concurrency cap, in that order), or
// Local when Protection fails. When one says no it returns the reason and
// when to try again; otherwise by is the protection that let the request
// through, nil for none, which finish must be given. A failing Protection
// is reported as degraded.
func (uc *Deliver) protect(ctx context.Context, d domain.Delivery, sub domain.Subscription, now time.Time) (
	until time.Time, reason string, by ports.Protection, degraded error,
) {
	req := ports.Admission{
		SubscriptionID: sub.ID, Holder: d.ID, Breaker: uc.Breaker, Now: now,
		PerSecond: sub.RateLimit, MaxInFlight: sub.MaxInFlight, Lease: sub.Timeout + leaseMargin,
	}
	for _, p := range []ports.Protection{uc.Protection, uc.Local} {
		if p == nil {
			continue
		}
		res, err := p.Admit(ctx, req)
		if err != nil {
			degraded = errors.Join(degraded, fmt.Errorf("protection: %w", err))
			continue
		}
		switch res.Refused {
		case ports.RefusedByBreaker:
			return res.RetryAt, domain.ReasonCircuitOpen, nil, degraded
		case ports.RefusedByRateLimit:
			return now.Add(res.RetryAfter), domain.ReasonThrottled, nil, degraded
		case ports.RefusedBySemaphore:
			return time.Time{}, reasonNoSlot, nil, degraded
		}
		return time.Time{}, "", p, degraded
	}
	return time.Time{}, "", nil, degraded
}

// slotWait is how long to postpone a delivery that found no slot:
// slotWait, plus up to as much again so the postponed deliveries spread
// out.
func (uc *Deliver) slotWait() time.Duration {
	return slotWait + time.Duration(uc.Random()*float64(slotWait))
}

// finish ends a request that by (protect's answer) let through: it gives
// the slot back and records the result on the breaker. recorded is false
// when no protection let it through. A slot whose Finish is lost comes
// back when its lease ends.
func (uc *Deliver) finish(ctx context.Context, by ports.Protection, subscriptionID, holder string, success bool, now time.Time) (
	state domain.Breaker, recorded bool, err error,
) {
	if by == nil {
		return domain.Breaker{}, false, nil
	}
	state, err = by.Finish(ctx, subscriptionID, holder, uc.Breaker, success, now)
	return state, err == nil, err
}

// postponed gives slot back, puts the claimed delivery d back without an
// attempt, due at until for reason, and reports it. A throttled delivery
// (its rate limit, its concurrency cap, its share of the worker) is
// appended again when due (requeueAt): it waits holding nothing of the
// worker, and comes back sooner than the scheduler's next scan.
func (uc *Deliver) postponed(ctx context.Context, slot *requestSlot, report Attempted, d domain.Delivery, until time.Time, reason string, now time.Time) (Attempted, error) {
	slot.release()
	later := postpone(d, until, reason, now)
	if err := uc.release(ctx, later); err != nil {
		return Attempted{}, fmt.Errorf("postpone delivery %s (%s): %w", d.ID, reason, err)
	}
	if reason == domain.ReasonThrottled {
		uc.requeueAt(later, until)
	}
	report.Skipped, report.Postponed, report.Delivery = true, reason, later
	return report, nil
}

// postpone puts a claimed delivery back, due at until, without an attempt.
func postpone(d domain.Delivery, until time.Time, reason string, now time.Time) domain.Delivery {
	d.Status = domain.DeliveryPending
	if d.Attempts > 0 {
		d.Status = domain.DeliveryRetrying
	}
	d.NextAttemptAt, d.Reason, d.UpdatedAt = until, reason, now
	return d
}

// release stores a delivery's new state without an attempt and enqueues
// whatever it let through.
func (uc *Deliver) release(ctx context.Context, d domain.Delivery) error {
	inLine, err := uc.Deliveries.ReleaseDelivery(ctx, d)
	if err != nil {
		return err
	}
	uc.enqueue(ctx, d.SubscriptionID, inLine)
	return nil
}

// maxRequeues bounds the throttled deliveries a worker appends again
// itself (requeueAt) at once; the rest wait for the scheduler's scan.
const maxRequeues = 256

// requeueAt appends a delivery that the rate limit, the concurrency cap or
// its share of the worker postponed to the stream again when it comes due,
// when that is within requeueWithin, so that it is tried again then
// rather than at the scheduler's next scan, a second or so later. At most
// maxRequeues wait so: each comes back through a claim, and a delivery
// refused again is postponed again. The scan still finds the ones whose
// append is lost (a worker that stops first), and a delivery appended by
// both is attempted once: the second claim finds it taken or done.
func (uc *Deliver) requeueAt(d domain.Delivery, due time.Time) {
	wait := max(due.Sub(uc.Clock.Now()), 0)
	if uc.Queue == nil || wait > requeueWithin {
		return
	}
	if uc.requeues.Add(1) > maxRequeues {
		uc.requeues.Add(-1)
		return
	}
	time.AfterFunc(wait, func() {
		defer uc.requeues.Add(-1)
		uc.enqueue(context.Background(), d.SubscriptionID, []string{d.ID})
	})
}

// enqueue appends deliveries ids of subscription sub (ones that became
// first in line, or came due). If the append is lost, the scheduler's scan
// finds them: they are due and not enqueued.
func (uc *Deliver) enqueue(ctx context.Context, sub string, ids []string) {
	if len(ids) > 0 && uc.Queue != nil {
		_ = uc.Queue.Publish(ctx, ports.DeliveryStream, plainEntries(sub, ids...)...)
	}
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
