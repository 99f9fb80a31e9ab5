package domain

// WithDefaults lets the external tests reach withDefaults, which only
// NewSubscription calls.
func (p RetryPolicy) WithDefaults() RetryPolicy { return p.withDefaults() }
