package domain

import "time"

func ValidateEventType(t string) error         { panic("TODO") }
func ValidateTypePattern(p string) error       { panic("TODO") }
func MatchType(pattern, eventType string) bool { panic("TODO") }

type RetryPolicy struct{}

func DefaultRetryPolicy() RetryPolicy           { panic("TODO") }
func (p RetryPolicy) withDefaults() RetryPolicy { panic("TODO") }
func (p RetryPolicy) Validate() error           { panic("TODO") }
func (p RetryPolicy) NextDelay(attempt int, retryAfter time.Duration, rnd func() float64) (time.Duration, bool) {
	panic("TODO")
}

type Pointer []string

func ParsePointer(s string) (Pointer, error)           { panic("TODO") }
func OrderingKeyFor(sub Subscription, ev Event) string { panic("TODO") }
