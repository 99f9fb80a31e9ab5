package domain

import (
	"fmt"
	"net/netip"
	"net/url"
	"strings"
	"time"
)

// Subscription defaults and limits (SPEC §3).
const (
	DefaultRateLimit   = 100
	MaxRateLimit       = 10000
	DefaultMaxInFlight = 100
	MaxMaxInFlight     = 1000
	DefaultTimeout     = 10 * time.Second
	MaxTimeout         = 60 * time.Second
	MaxEventTypes      = 100
	MaxDescriptionLen  = 1024
	MaxURLLength       = 2048
)

// DisabledGone is the disabled reason set when an endpoint answered 410 Gone.
const DisabledGone = "gone"

// Subscription is an endpoint's interest in a set of event types, with the
// settings that govern how deliveries reach it.
type Subscription struct {
	ID          string
	URL         string
	EventTypes  []string
	Description string
	// Secret signs every webhook. PreviousSecret, while
	// PreviousSecretExpiresAt is in the future, signs too (secret rotation).
	Secret                  Secret
	PreviousSecret          Secret
	PreviousSecretExpiresAt time.Time
	Active                  bool
	DisabledReason          string
	RateLimit               int
	MaxInFlight             int
	Timeout                 time.Duration
	RetryPolicy             RetryPolicy
	// OrderingKey is a JSON pointer into the event (e.g. /data/customer_id)
	// or "/ordering_key" for the event's own key; empty means unordered.
	OrderingKey string
	Headers     map[string]string
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

// NewSubscriptionInput is what a producer supplies to create a subscription.
// Zero values take the defaults; Active nil means true.
type NewSubscriptionInput struct {
	URL         string
	EventTypes  []string
	Description string
	Secret      string
	RateLimit   int
	MaxInFlight int
	Timeout     time.Duration
	RetryPolicy *RetryPolicy
	OrderingKey string
	Headers     map[string]string
	Active      *bool
}

// NewSubscription validates in and returns a subscription with a fresh id and
// a generated secret when none was given.
func NewSubscription(in NewSubscriptionInput, now time.Time) (Subscription, error) {
	now = now.UTC().Truncate(time.Microsecond)
	s := Subscription{
		ID:          MustNewID(SubscriptionIDPrefix, now),
		URL:         in.URL,
		EventTypes:  in.EventTypes,
		Description: in.Description,
		Active:      in.Active == nil || *in.Active,
		RateLimit:   orDefault(in.RateLimit, DefaultRateLimit),
		MaxInFlight: orDefault(in.MaxInFlight, DefaultMaxInFlight),
		Timeout:     in.Timeout,
		RetryPolicy: DefaultRetryPolicy(),
		OrderingKey: in.OrderingKey,
		Headers:     in.Headers,
		CreatedAt:   now,
		UpdatedAt:   now,
	}
	if s.Timeout == 0 {
		s.Timeout = DefaultTimeout
	}
	if in.RetryPolicy != nil {
		s.RetryPolicy = in.RetryPolicy.withDefaults()
	}
	if s.Headers == nil {
		s.Headers = map[string]string{}
	}
	for name, value := range s.Headers {
		if value == RedactedHeaderValue {
			return Subscription{}, invalid("headers", "%q is %q, which reads show in place of a value: send the value itself", name, RedactedHeaderValue)
		}
	}
	if in.Secret != "" {
		secret, err := ParseSecret(in.Secret)
		if err != nil {
			return Subscription{}, &ValidationError{Field: "secret", Message: err.Error()}
		}
		s.Secret = secret
	} else {
		s.Secret = MustGenerateSecret()
	}
	if err := s.Validate(); err != nil {
		return Subscription{}, err
	}
	return s, nil
}

func orDefault(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// orderingRoots are the members of the event document an ordering key may
// point into (see OrderingKeyFor).
var orderingRoots = map[string]bool{"data": true, "ordering_key": true, "type": true, "source": true, "id": true}

// Validate checks every field of s. It is called after every change, so a
// subscription in a store is always valid.
func (s Subscription) Validate() error {
	if err := s.validateText(); err != nil {
		return err
	}
	if err := ValidateEndpointURL(s.URL); err != nil {
		return &ValidationError{Field: "url", Message: err.Error()}
	}
	if len(s.EventTypes) == 0 {
		return invalid("event_types", "must list at least one event type or pattern")
	}
	if len(s.EventTypes) > MaxEventTypes {
		return invalid("event_types", "must list at most %d entries, got %d", MaxEventTypes, len(s.EventTypes))
	}
	for i, p := range s.EventTypes {
		if err := ValidateTypePattern(p); err != nil {
			return invalid(fmt.Sprintf("event_types[%d]", i), "%v", err)
		}
	}
	if len(s.Description) > MaxDescriptionLen {
		return invalid("description", "must be at most %d bytes, got %d", MaxDescriptionLen, len(s.Description))
	}
	if s.RateLimit < 1 || s.RateLimit > MaxRateLimit {
		return invalid("rate_limit", "must be 1..%d requests per second, got %d", MaxRateLimit, s.RateLimit)
	}
	if s.MaxInFlight < 1 || s.MaxInFlight > MaxMaxInFlight {
		return invalid("max_in_flight", "must be 1..%d, got %d", MaxMaxInFlight, s.MaxInFlight)
	}
	if s.Timeout < time.Millisecond || s.Timeout > MaxTimeout {
		return invalid("timeout", "must be between 1ms and %s, got %s", MaxTimeout, s.Timeout)
	}
	if err := s.RetryPolicy.Validate(); err != nil {
		return err
	}
	if s.OrderingKey != "" {
		p, err := ParsePointer(s.OrderingKey)
		if err != nil {
			return &ValidationError{Field: "ordering_key", Message: err.Error()}
		}
		if !orderingRoots[p[0]] || (p[0] != "data" && len(p) > 1) {
			return invalid("ordering_key", "%q points nowhere in an event: it must be /data/..., /ordering_key, /type, /source or /id", s.OrderingKey)
		}
	}
	if s.Secret.IsZero() {
		return invalid("secret", "is required")
	}
	if err := ValidateHeaders(s.Headers); err != nil {
		return err
	}
	return nil
}

// validateText checks that the free-form strings of s are text (see
// checkText): valid UTF-8 without NUL. Header names and values have rules
// of their own (Validate).
func (s Subscription) validateText() error {
	if err := checkText("url", s.URL); err != nil {
		return err
	}
	for i, p := range s.EventTypes {
		if err := checkText(fmt.Sprintf("event_types[%d]", i), p); err != nil {
			return err
		}
	}
	if err := checkText("description", s.Description); err != nil {
		return err
	}
	return checkText("ordering_key", s.OrderingKey)
}

// ValidateEndpointURL checks that raw is an absolute http(s) URL with a host.
// Whether the host is an allowed address is the SSRF guard's business, not
// this function's: it needs DNS.
func ValidateEndpointURL(raw string) error {
	if raw == "" {
		return fmt.Errorf("is required")
	}
	if len(raw) > MaxURLLength {
		return fmt.Errorf("must be at most %d bytes, got %d", MaxURLLength, len(raw))
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("%q is not a valid URL", raw)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("scheme must be http or https, got %q", u.Scheme)
	}
	if u.Hostname() == "" {
		return fmt.Errorf("%q has no host", raw)
	}
	if AmbiguousNumericHost(u.Hostname()) {
		return fmt.Errorf("host %q ends in a number but is not an IP address in standard form (such as 203.0.113.7)", u.Hostname())
	}
	if u.User != nil {
		return fmt.Errorf("must not carry credentials; use headers instead")
	}
	if u.Fragment != "" {
		return fmt.Errorf("must not have a fragment")
	}
	return nil
}

// AmbiguousNumericHost reports whether host ends in a number without being
// an IP address in standard form: 127.1, 2130706433, 0x7f.1, 017700000001,
// 10.0.0.1. (trailing dot). URL parsers (WHATWG) read such a host as an
// IPv4 address, and so do resolvers built on inet_aton (glibc's), while
// Go's own resolver asks DNS for it: what it reaches depends on the
// machine, so the SSRF guard could not tell what it checks. No DNS name
// ends in an all-numeric label (RFC 3696 §2).
func AmbiguousNumericHost(host string) bool {
	if _, err := netip.ParseAddr(host); err == nil {
		return false
	}
	label := strings.TrimSuffix(host, ".")
	label = label[strings.LastIndexByte(label, '.')+1:]
	if hex, ok := strings.CutPrefix(strings.ToLower(label), "0x"); ok {
		return strings.Trim(hex, "0123456789abcdef") == ""
	}
	return label != "" && strings.Trim(label, "0123456789") == ""
}

// Matches reports whether an event of type eventType should go to s.
func (s Subscription) Matches(eventType string) bool {
	for _, p := range s.EventTypes {
		if MatchType(p, eventType) {
			return true
		}
	}
	return false
}

// SigningSecrets returns the secrets that sign a webhook sent at now: the
// current one, and the previous one while its overlap window lasts.
func (s Subscription) SigningSecrets(now time.Time) []Secret {
	if !s.PreviousSecret.IsZero() && now.Before(s.PreviousSecretExpiresAt) {
		return []Secret{s.Secret, s.PreviousSecret}
	}
	return []Secret{s.Secret}
}

// SubscriptionPatch is a partial update: nil fields are left as they are.
type SubscriptionPatch struct {
	URL         *string
	EventTypes  *[]string
	Description *string
	RateLimit   *int
	MaxInFlight *int
	Timeout     *time.Duration
	RetryPolicy *RetryPolicy
	// OrderingKey set to "" turns ordering off.
	OrderingKey *string
	Headers     *map[string]string
	Active      *bool
}

// Apply changes s by p at now and validates the result; on error s is left
// unchanged. Re-activating a subscription clears its disabled reason.
func (s *Subscription) Apply(p SubscriptionPatch, now time.Time) error {
	next := *s
	if p.URL != nil {
		next.URL = *p.URL
	}
	if p.EventTypes != nil {
		next.EventTypes = *p.EventTypes
	}
	if p.Description != nil {
		next.Description = *p.Description
	}
	if p.RateLimit != nil {
		next.RateLimit = *p.RateLimit
	}
	if p.MaxInFlight != nil {
		next.MaxInFlight = *p.MaxInFlight
	}
	if p.Timeout != nil {
		next.Timeout = *p.Timeout
	}
	if p.RetryPolicy != nil {
		next.RetryPolicy = p.RetryPolicy.withDefaults()
	}
	if p.OrderingKey != nil {
		next.OrderingKey = *p.OrderingKey
	}
	if p.Headers != nil {
		headers, err := keepRedactedHeaders(s.Headers, *p.Headers)
		if err != nil {
			return err
		}
		next.Headers = headers
	}
	if p.Active != nil {
		next.Active = *p.Active
		if next.Active {
			next.DisabledReason = ""
		}
	}
	if err := next.Validate(); err != nil {
		return err
	}
	next.UpdatedAt = now.UTC().Truncate(time.Microsecond)
	*s = next
	return nil
}

// RedactedHeaderValue is what reads show in place of every custom header
// value: the values are credentials (Authorization: Bearer …) that no read
// returns. Sent back in a patch, it stands for the value stored.
const RedactedHeaderValue = "***"

// keepRedactedHeaders is the headers a patch sets: patch, where each
// RedactedHeaderValue is the current value of that header (names compared
// as HTTP does, without case), so a client can send back what it read and
// change only some values. A RedactedHeaderValue for a header that has no
// value is refused.
func keepRedactedHeaders(current, patch map[string]string) (map[string]string, error) {
	out := make(map[string]string, len(patch))
	for name, value := range patch {
		if value == RedactedHeaderValue {
			kept, ok := headerValue(current, name)
			if !ok {
				return nil, invalid("headers", "%q is %q, which stands for the stored value, and the subscription has no %s header", name, RedactedHeaderValue, name)
			}
			value = kept
		}
		out[name] = value
	}
	return out, nil
}

func headerValue(headers map[string]string, name string) (string, bool) {
	if v, ok := headers[name]; ok {
		return v, true
	}
	for n, v := range headers {
		if strings.EqualFold(n, name) {
			return v, true
		}
	}
	return "", false
}

// DefaultRotationOverlap is how long the previous secret keeps signing after
// a rotation, so receivers can switch without dropping a webhook.
const DefaultRotationOverlap = 24 * time.Hour

// RotateSecret makes next the signing secret; the current one keeps signing
// too until now+overlap. A rotation during an overlap drops the oldest
// secret: at most two sign at once.
func (s *Subscription) RotateSecret(next Secret, now time.Time, overlap time.Duration) error {
	if next.IsZero() {
		return invalid("secret", "is required")
	}
	if next.Equal(s.Secret) {
		return invalid("secret", "must differ from the current secret")
	}
	if overlap < 0 {
		return invalid("overlap", "must not be negative, got %s", overlap)
	}
	now = now.UTC().Truncate(time.Microsecond)
	s.PreviousSecret, s.PreviousSecretExpiresAt = s.Secret, now.Add(overlap)
	s.Secret, s.UpdatedAt = next, now
	return nil
}
