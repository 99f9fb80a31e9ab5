package domain

// WithDefaults lets the external tests reach withDefaults, which only
// NewSubscription calls.
func (p RetryPolicy) WithDefaults() RetryPolicy { return p.withDefaults() }

// MayPrecede lets the external tests reach mayPrecede, the part of
// FirstInLine that events awaiting fan-out answer.
func (s Subscription) MayPrecede(ev Event, key string) bool { return s.mayPrecede(ev, key) }
