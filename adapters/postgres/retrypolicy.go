package postgres

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/dispatch-webhooks/dispatch/domain"
)

// retryPolicyJSON is the retry_policy column's document. It belongs to the
// schema, not to the domain (which has no JSON tags) or the API (whose shape
// may evolve separately): renaming a domain field must not silently change
// stored rows. Durations are Go duration strings, exact at any precision and
// readable in psql.
type retryPolicyJSON struct {
	Strategy        string   `json:"strategy,omitempty"`
	InitialInterval string   `json:"initial_interval,omitempty"`
	Multiplier      float64  `json:"multiplier,omitempty"`
	MaxInterval     string   `json:"max_interval,omitempty"`
	Jitter          float64  `json:"jitter,omitempty"`
	MaxAttempts     int      `json:"max_attempts,omitempty"`
	Schedule        []string `json:"schedule,omitempty"`
}

func marshalRetryPolicy(p domain.RetryPolicy) ([]byte, error) {
	doc := retryPolicyJSON{
		Strategy:        string(p.Strategy),
		InitialInterval: durationText(p.InitialInterval),
		Multiplier:      p.Multiplier,
		MaxInterval:     durationText(p.MaxInterval),
		Jitter:          p.Jitter,
		MaxAttempts:     p.MaxAttempts,
	}
	for _, d := range p.Schedule {
		doc.Schedule = append(doc.Schedule, d.String())
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("encode retry policy: %w", err)
	}
	return b, nil
}

func unmarshalRetryPolicy(b []byte) (domain.RetryPolicy, error) {
	var doc retryPolicyJSON
	if err := json.Unmarshal(b, &doc); err != nil {
		return domain.RetryPolicy{}, fmt.Errorf("retry policy: %w", err)
	}
	p := domain.RetryPolicy{
		Strategy:    domain.RetryStrategy(doc.Strategy),
		Multiplier:  doc.Multiplier,
		Jitter:      doc.Jitter,
		MaxAttempts: doc.MaxAttempts,
	}
	var err error
	if p.InitialInterval, err = parseDurationText(doc.InitialInterval); err != nil {
		return domain.RetryPolicy{}, fmt.Errorf("retry policy initial_interval: %w", err)
	}
	if p.MaxInterval, err = parseDurationText(doc.MaxInterval); err != nil {
		return domain.RetryPolicy{}, fmt.Errorf("retry policy max_interval: %w", err)
	}
	for i, s := range doc.Schedule {
		d, err := time.ParseDuration(s)
		if err != nil {
			return domain.RetryPolicy{}, fmt.Errorf("retry policy schedule[%d]: %w", i, err)
		}
		p.Schedule = append(p.Schedule, d)
	}
	return p, nil
}

// durationText leaves a zero duration out of the document.
func durationText(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}

func parseDurationText(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	return time.ParseDuration(s)
}
