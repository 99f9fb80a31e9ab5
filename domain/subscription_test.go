package domain

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestNewSubscriptionValidates(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
	valid := func() NewSubscriptionInput {
		return NewSubscriptionInput{URL: "https://example.com/hook", EventTypes: []string{"order.*"}}
	}
	manyHeaders := map[string]string{}
	for i := range MaxHeaders + 1 {
		manyHeaders["X-H"+strings.Repeat("a", i)] = "v"
	}
	tests := []struct {
		name   string
		modify func(*NewSubscriptionInput)
		field  string // "" means valid
	}{
		{"defaults are valid", func(*NewSubscriptionInput) {}, ""},
		{"explicit secret", func(in *NewSubscriptionInput) { in.Secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" }, ""},
		{"ordering by data", func(in *NewSubscriptionInput) { in.OrderingKey = "/data/customer/id" }, ""},
		{"ordering by event key", func(in *NewSubscriptionInput) { in.OrderingKey = "/ordering_key" }, ""},
		{"custom header", func(in *NewSubscriptionInput) { in.Headers = map[string]string{"X-Tenant": "acme"} }, ""},
		{"missing url", func(in *NewSubscriptionInput) { in.URL = "" }, "url"},
		{"ftp url", func(in *NewSubscriptionInput) { in.URL = "ftp://example.com/x" }, "url"},
		{"relative url", func(in *NewSubscriptionInput) { in.URL = "/hook" }, "url"},
		{"url with credentials", func(in *NewSubscriptionInput) { in.URL = "https://u:p@example.com/" }, "url"},
		{"url with fragment", func(in *NewSubscriptionInput) { in.URL = "https://example.com/#x" }, "url"},
		{"long url", func(in *NewSubscriptionInput) { in.URL = "https://example.com/" + strings.Repeat("a", MaxURLLength) }, "url"},
		{"no event types", func(in *NewSubscriptionInput) { in.EventTypes = nil }, "event_types"},
		{"bad pattern", func(in *NewSubscriptionInput) { in.EventTypes = []string{"order*"} }, "event_types[0]"},
		{"bad second pattern", func(in *NewSubscriptionInput) { in.EventTypes = []string{"a", "b..c"} }, "event_types[1]"},
		{"long description", func(in *NewSubscriptionInput) { in.Description = strings.Repeat("d", MaxDescriptionLen+1) }, "description"},
		{"bad secret", func(in *NewSubscriptionInput) { in.Secret = "hunter2" }, "secret"},
		{"negative rate limit", func(in *NewSubscriptionInput) { in.RateLimit = -5 }, "rate_limit"},
		{"huge rate limit", func(in *NewSubscriptionInput) { in.RateLimit = MaxRateLimit + 1 }, "rate_limit"},
		{"negative max in flight", func(in *NewSubscriptionInput) { in.MaxInFlight = -1 }, "max_in_flight"},
		{"timeout too long", func(in *NewSubscriptionInput) { in.Timeout = 2 * MaxTimeout }, "timeout"},
		{"negative timeout", func(in *NewSubscriptionInput) { in.Timeout = -time.Second }, "timeout"},
		{"pointer without slash", func(in *NewSubscriptionInput) { in.OrderingKey = "data/x" }, "ordering_key"},
		{"pointer outside the event", func(in *NewSubscriptionInput) { in.OrderingKey = "/customer_id" }, "ordering_key"},
		{"pointer below a string member", func(in *NewSubscriptionInput) { in.OrderingKey = "/type/x" }, "ordering_key"},
		{"reserved header", func(in *NewSubscriptionInput) { in.Headers = map[string]string{"Webhook-Id": "x"} }, "headers.Webhook-Id"},
		{"bad header name", func(in *NewSubscriptionInput) { in.Headers = map[string]string{"X Bad": "x"} }, "headers"},
		{"header injection", func(in *NewSubscriptionInput) { in.Headers = map[string]string{"X-A": "a\r\nX-B: b"} }, "headers.X-A"},
		{"too many headers", func(in *NewSubscriptionInput) { in.Headers = manyHeaders }, "headers"},
		{"NUL in description", func(in *NewSubscriptionInput) { in.Description = "a\x00b" }, "description"},
		{"invalid UTF-8 in description", func(in *NewSubscriptionInput) { in.Description = "a\xffb" }, "description"},
		{"NUL in ordering key", func(in *NewSubscriptionInput) { in.OrderingKey = "/data/a\x00" }, "ordering_key"},
		{"invalid UTF-8 in url", func(in *NewSubscriptionInput) { in.URL = "https://example.com/\xff" }, "url"},
		{"NUL in url", func(in *NewSubscriptionInput) { in.URL = "https://example.com/\x00" }, "url"},
		{"NUL in an event type", func(in *NewSubscriptionInput) { in.EventTypes = []string{"a", "b\x00"} }, "event_types[1]"},
		{"NUL in secret", func(in *NewSubscriptionInput) { in.Secret = "whsec_\x00" }, "secret"},
		{"bad retry policy", func(in *NewSubscriptionInput) { in.RetryPolicy = &RetryPolicy{MaxAttempts: 1000} }, "retry_policy.max_attempts"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in := valid()
			tt.modify(&in)
			sub, err := NewSubscription(in, now)
			if tt.field == "" {
				if err != nil {
					t.Fatalf("NewSubscription: %v", err)
				}
				if !strings.HasPrefix(sub.ID, SubscriptionIDPrefix) || sub.Secret.IsZero() || !sub.Active {
					t.Errorf("subscription = %+v, want an id, a secret, active", sub)
				}
				return
			}
			var invalid *ValidationError
			if !errors.As(err, &invalid) {
				t.Fatalf("err = %v, want a ValidationError on %s", err, tt.field)
			}
			if invalid.Field != tt.field {
				t.Errorf("field = %q (%s), want %q", invalid.Field, invalid.Message, tt.field)
			}
		})
	}
}

func TestNewSubscriptionDefaults(t *testing.T) {
	t.Parallel()
	inactive := false
	sub, err := NewSubscription(NewSubscriptionInput{URL: "http://example.com", EventTypes: []string{"*"}, Active: &inactive}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if sub.RateLimit != DefaultRateLimit || sub.MaxInFlight != DefaultMaxInFlight || sub.Timeout != DefaultTimeout {
		t.Errorf("limits = %d/%d/%s, want defaults", sub.RateLimit, sub.MaxInFlight, sub.Timeout)
	}
	if sub.Active {
		t.Error("Active: false was ignored")
	}
	if sub.Headers == nil {
		t.Error("headers are nil, want an empty map")
	}
}

func TestSigningSecretsDuringRotation(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
	current, previous := MustGenerateSecret(), MustGenerateSecret()
	sub := Subscription{Secret: current, PreviousSecret: previous, PreviousSecretExpiresAt: now.Add(time.Hour)}
	if got := sub.SigningSecrets(now); len(got) != 2 || !got[0].Equal(current) || !got[1].Equal(previous) {
		t.Errorf("during the overlap: %d secrets, want current then previous", len(got))
	}
	if got := sub.SigningSecrets(now.Add(time.Hour)); len(got) != 1 || !got[0].Equal(current) {
		t.Errorf("after the overlap: %d secrets, want only the current one", len(got))
	}
}

func TestSubscriptionApply(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
	base, err := NewSubscription(NewSubscriptionInput{URL: "https://example.com/a", EventTypes: []string{"a"},
		OrderingKey: "/data/x", Headers: map[string]string{"X-A": "1"}}, now)
	if err != nil {
		t.Fatal(err)
	}
	base.Active, base.DisabledReason = false, DisabledGone
	url, types, limit, empty, on := "https://example.com/b", []string{"b.*"}, 7, "", true
	timeout := 3 * time.Second

	s := base
	if err := s.Apply(SubscriptionPatch{URL: &url, EventTypes: &types, RateLimit: &limit, Timeout: &timeout,
		OrderingKey: &empty, Active: &on}, now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if s.URL != url || s.EventTypes[0] != "b.*" || s.RateLimit != 7 || s.Timeout != timeout || s.OrderingKey != "" {
		t.Errorf("patched = %+v", s)
	}
	if !s.Active || s.DisabledReason != "" {
		t.Errorf("re-enabled: active=%v reason=%q, want active with no reason", s.Active, s.DisabledReason)
	}
	if s.Headers["X-A"] != "1" || s.MaxInFlight != base.MaxInFlight || s.Description != base.Description {
		t.Error("fields not in the patch changed")
	}
	if !s.UpdatedAt.Equal(now.Add(time.Minute)) || !s.CreatedAt.Equal(base.CreatedAt) {
		t.Errorf("updated_at %s created_at %s", s.UpdatedAt, s.CreatedAt)
	}

	s = base
	bad := -1
	if err := s.Apply(SubscriptionPatch{URL: &url, RateLimit: &bad}, now); err == nil {
		t.Fatal("Apply accepted rate_limit -1")
	}
	if s.URL != base.URL || s.RateLimit != base.RateLimit {
		t.Error("a refused patch changed the subscription")
	}
}

func TestRotateSecret(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
	first, second, third := MustGenerateSecret(), MustGenerateSecret(), MustGenerateSecret()
	s := Subscription{Secret: first}
	if err := s.RotateSecret(second, now, time.Hour); err != nil {
		t.Fatal(err)
	}
	if !s.Secret.Equal(second) || !s.PreviousSecret.Equal(first) || !s.PreviousSecretExpiresAt.Equal(now.Add(time.Hour)) {
		t.Errorf("after rotation: %+v", s)
	}
	if got := s.SigningSecrets(now.Add(time.Minute)); len(got) != 2 {
		t.Errorf("%d secrets sign during the overlap, want 2", len(got))
	}
	if err := s.RotateSecret(third, now.Add(time.Minute), time.Hour); err != nil {
		t.Fatal(err)
	}
	if !s.PreviousSecret.Equal(second) {
		t.Error("a second rotation must keep only the secret it replaced")
	}
	for _, bad := range []Secret{{}, third} {
		if err := s.RotateSecret(bad, now, time.Hour); err == nil {
			t.Errorf("RotateSecret accepted %v", bad)
		}
	}
	if err := s.RotateSecret(MustGenerateSecret(), now, -time.Second); err == nil {
		t.Error("RotateSecret accepted a negative overlap")
	}
}

func TestApplyKeepsTheStoredValueOfARedactedHeader(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
	base, err := NewSubscription(NewSubscriptionInput{URL: "https://example.com/a", EventTypes: []string{"a"},
		Headers: map[string]string{"Authorization": "Bearer token-1", "X-Tenant": "acme"}}, now)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		patch map[string]string
		want  map[string]string
		err   string
	}{
		{"sent back as read", map[string]string{"Authorization": "***", "X-Tenant": "***"},
			map[string]string{"Authorization": "Bearer token-1", "X-Tenant": "acme"}, ""},
		{"one value changed", map[string]string{"Authorization": "***", "X-Tenant": "globex"},
			map[string]string{"Authorization": "Bearer token-1", "X-Tenant": "globex"}, ""},
		{"a new value replaces", map[string]string{"Authorization": "Bearer token-2"},
			map[string]string{"Authorization": "Bearer token-2"}, ""},
		{"names without case", map[string]string{"authorization": "***"},
			map[string]string{"authorization": "Bearer token-1"}, ""},
		{"no stored value", map[string]string{"X-New": "***"}, nil, `headers: "X-New" is "***"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := base
			patch := tc.patch
			err := s.Apply(SubscriptionPatch{Headers: &patch}, now.Add(time.Minute))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Apply = %v, want an error containing %q", err, tc.err)
				}
				if !reflect.DeepEqual(s.Headers, base.Headers) {
					t.Errorf("a refused patch changed the headers to %v", s.Headers)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(s.Headers, tc.want) {
				t.Errorf("headers = %v, want %v", s.Headers, tc.want)
			}
		})
	}
	if _, err := NewSubscription(NewSubscriptionInput{URL: "https://example.com/a", EventTypes: []string{"a"},
		Headers: map[string]string{"Authorization": "***"}}, now); err == nil || !strings.Contains(err.Error(), "headers") {
		t.Errorf("create with a redacted value = %v, want a headers error", err)
	}
}
