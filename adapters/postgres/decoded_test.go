package postgres

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/dispatch-webhooks/dispatch/adapters/postgres/sqlcgen"
	"github.com/dispatch-webhooks/dispatch/domain"
)

func memoRow(t *testing.T, edit func(*domain.Subscription)) sqlcgen.Subscription {
	t.Helper()
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	sub := domain.Subscription{
		ID: "sub_1", URL: "https://example.com/hook", EventTypes: []string{"order.*"},
		Secret: domain.MustGenerateSecret(), PreviousSecret: domain.MustGenerateSecret(),
		PreviousSecretExpiresAt: now.Add(time.Hour), Active: true,
		RateLimit: 10, MaxInFlight: 5, Timeout: 7 * time.Second,
		RetryPolicy: domain.DefaultRetryPolicy(), Headers: map[string]string{"X-Team": "billing"},
		CreatedAt: now, UpdatedAt: now,
	}
	if edit != nil {
		edit(&sub)
	}
	row, err := subscriptionRow(nil, sub)
	if err != nil {
		t.Fatal(err)
	}
	return row
}

func mapPointer(m map[string]string) uintptr { return reflect.ValueOf(m).Pointer() }

func TestDecodedSubscriptionsReuseOnlyIdenticalColumns(t *testing.T) {
	row := memoRow(t, nil)
	want, err := toSubscription(nil, row)
	if err != nil {
		t.Fatal(err)
	}
	var memo decodedSubscriptions
	first, err := memo.subscription(nil, row)
	if err != nil {
		t.Fatal(err)
	}
	again, err := memo.subscription(nil, row)
	if err != nil {
		t.Fatal(err)
	}
	for _, got := range []domain.Subscription{first, again} {
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("memo gave %#v, want %#v", got, want)
		}
	}
	if mapPointer(first.Headers) != mapPointer(again.Headers) {
		t.Fatal("an unchanged row was decoded again")
	}

	// Whatever decoded column changes, the next read decodes the row anew;
	// the plain columns always come from the row itself.
	changes := map[string]func(*domain.Subscription){
		"secret":          func(s *domain.Subscription) { s.Secret = domain.MustGenerateSecret() },
		"previous secret": func(s *domain.Subscription) { s.PreviousSecret = domain.Secret{} },
		"retry policy":    func(s *domain.Subscription) { s.RetryPolicy.MaxAttempts = 3 },
		"headers":         func(s *domain.Subscription) { s.Headers = map[string]string{"X-Team": "payments"} },
		"plain columns": func(s *domain.Subscription) {
			s.URL, s.Active, s.Timeout = "https://example.com/v2", false, time.Second
		},
	}
	for name, change := range changes {
		t.Run(name, func(t *testing.T) {
			var memo decodedSubscriptions
			if _, err := memo.subscription(nil, row); err != nil {
				t.Fatal(err)
			}
			changed := memoRow(t, change)
			// The secrets are generated afresh by memoRow: keep the
			// first row's unless the change is about them.
			if name != "secret" {
				changed.Secret = row.Secret
			}
			if name != "previous secret" {
				changed.PreviousSecret = row.PreviousSecret
			}
			want, err := toSubscription(nil, changed)
			if err != nil {
				t.Fatal(err)
			}
			got, err := memo.subscription(nil, changed)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("after a change of %s, memo gave %#v, want %#v", name, got, want)
			}
		})
	}
}

func TestDecodedSubscriptionsRefuseBadRowsAndStayBounded(t *testing.T) {
	var memo decodedSubscriptions
	bad := memoRow(t, nil)
	bad.Headers = []byte(`{"X-Team": 1}`)
	if _, err := memo.subscription(nil, bad); err == nil {
		t.Fatal("headers that are not strings were accepted")
	}
	if _, ok := memo.parts.Load(bad.ID); ok {
		t.Fatal("a row that failed to decode was kept")
	}

	row := memoRow(t, nil)
	for i := range maxDecodedSubscriptions + 10 {
		row.ID = fmt.Sprintf("sub_%d", i)
		if _, err := memo.subscription(nil, row); err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	memo.parts.Range(func(any, any) bool { n++; return true })
	if n > maxDecodedSubscriptions {
		t.Fatalf("memo holds %d rows, more than its bound %d", n, maxDecodedSubscriptions)
	}
}
