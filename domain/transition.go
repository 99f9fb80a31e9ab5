package domain

import "time"

// Attempted returns d after an attempt that ended with out at now: delivered
// on success; retrying with the policy's next delay (or Retry-After) while
// attempts remain; dead when they are used up or the failure is permanent.
// The caller records the status code and error of the attempt.
func (d Delivery) Attempted(out Outcome, policy RetryPolicy, now time.Time, rnd func() float64) Delivery {
	d.Attempts++
	d.UpdatedAt = now
	d.Reason = ""
	switch out.Kind {
	case OutcomeSuccess:
		d.Status = DeliveryDelivered
	case OutcomeRetryable:
		delay, ok := policy.NextDelay(d.Attempts, out.RetryAfter, rnd)
		if !ok {
			d.Status = DeliveryDead
			break
		}
		d.Status = DeliveryRetrying
		d.NextAttemptAt = now.Add(delay)
	default:
		d.Status = DeliveryDead
	}
	return d
}
