package postgres

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/dispatch-webhooks/dispatch/adapters/postgres/sqlcgen"
	"github.com/dispatch-webhooks/dispatch/domain"
)

// This file maps sqlc rows to domain values and back; nothing outside it
// knows how a domain field is laid out in a column.

// subscriptionRow lays sub out as its table row.
func subscriptionRow(sub domain.Subscription) (sqlcgen.Subscription, error) {
	policy, err := marshalRetryPolicy(sub.RetryPolicy)
	if err != nil {
		return sqlcgen.Subscription{}, err
	}
	headers := sub.Headers
	if headers == nil {
		headers = map[string]string{}
	}
	headersJSON, err := json.Marshal(headers)
	if err != nil {
		return sqlcgen.Subscription{}, fmt.Errorf("encode headers: %w", err)
	}
	return sqlcgen.Subscription{
		ID:                      sub.ID,
		Url:                     sub.URL,
		EventTypes:              nonNil(sub.EventTypes),
		Description:             sub.Description,
		Secret:                  revealSecret(sub.Secret),
		PreviousSecret:          revealSecret(sub.PreviousSecret),
		PreviousSecretExpiresAt: optionalTime(storedTime(sub.PreviousSecretExpiresAt)),
		Active:                  sub.Active,
		DisabledReason:          sub.DisabledReason,
		RateLimit:               int32(sub.RateLimit),
		MaxInFlight:             int32(sub.MaxInFlight),
		Timeout:                 interval(sub.Timeout),
		RetryPolicy:             policy,
		OrderingKey:             sub.OrderingKey,
		Headers:                 headersJSON,
		CreatedAt:               storedTime(sub.CreatedAt),
		UpdatedAt:               storedTime(sub.UpdatedAt),
	}, nil
}

// toSubscription rehydrates a subscription row. It fails only on a row this
// package did not write (a secret or JSON column it cannot read).
func toSubscription(row sqlcgen.Subscription) (domain.Subscription, error) {
	parts, err := decodeSubscriptionParts(row)
	if err != nil {
		return domain.Subscription{}, err
	}
	return assembleSubscription(row, parts), nil
}

// subscriptionParts are the fields of a subscription row that take more
// than a copy to read: the secrets (base64) and the JSON columns.
type subscriptionParts struct {
	secret, previousSecret domain.Secret
	retryPolicy            domain.RetryPolicy
	headers                map[string]string
}

func decodeSubscriptionParts(row sqlcgen.Subscription) (subscriptionParts, error) {
	secret, err := parseSecret(row.Secret)
	if err != nil {
		return subscriptionParts{}, fmt.Errorf("subscription %s: secret: %w", row.ID, err)
	}
	previous, err := parseSecret(row.PreviousSecret)
	if err != nil {
		return subscriptionParts{}, fmt.Errorf("subscription %s: previous secret: %w", row.ID, err)
	}
	policy, err := unmarshalRetryPolicy(row.RetryPolicy)
	if err != nil {
		return subscriptionParts{}, fmt.Errorf("subscription %s: %w", row.ID, err)
	}
	headers := map[string]string{}
	if err := json.Unmarshal(row.Headers, &headers); err != nil {
		return subscriptionParts{}, fmt.Errorf("subscription %s: headers: %w", row.ID, err)
	}
	if headers == nil { // a JSON null
		headers = map[string]string{}
	}
	return subscriptionParts{secret: secret, previousSecret: previous, retryPolicy: policy, headers: headers}, nil
}

// assembleSubscription is row as a subscription, with its decoded parts.
func assembleSubscription(row sqlcgen.Subscription, parts subscriptionParts) domain.Subscription {
	return domain.Subscription{
		ID:                      row.ID,
		URL:                     row.Url,
		EventTypes:              row.EventTypes,
		Description:             row.Description,
		Secret:                  parts.secret,
		PreviousSecret:          parts.previousSecret,
		PreviousSecretExpiresAt: fromOptionalTime(row.PreviousSecretExpiresAt),
		Active:                  row.Active,
		DisabledReason:          row.DisabledReason,
		RateLimit:               int(row.RateLimit),
		MaxInFlight:             int(row.MaxInFlight),
		Timeout:                 fromInterval(row.Timeout),
		RetryPolicy:             parts.retryPolicy,
		OrderingKey:             row.OrderingKey,
		Headers:                 parts.headers,
		CreatedAt:               row.CreatedAt.UTC(),
		UpdatedAt:               row.UpdatedAt.UTC(),
	}
}

func toSubscriptions(rows []sqlcgen.Subscription) ([]domain.Subscription, error) {
	out := make([]domain.Subscription, len(rows))
	for i, row := range rows {
		sub, err := toSubscription(row)
		if err != nil {
			return nil, err
		}
		out[i] = sub
	}
	return out, nil
}

// revealSecret is the stored form of a secret: whsec_… or "" when unset.
func revealSecret(s domain.Secret) string {
	if s.IsZero() {
		return ""
	}
	return s.Reveal()
}

func parseSecret(s string) (domain.Secret, error) {
	if s == "" {
		return domain.Secret{}, nil
	}
	return domain.ParseSecret(s)
}

// normalizeEvent is e as a read will return it: times in UTC at microsecond
// precision, a status, and non-nil data (the column is NOT NULL).
func normalizeEvent(e domain.Event) domain.Event {
	e.CreatedAt = storedTime(e.CreatedAt)
	if e.Status == "" {
		e.Status = domain.EventPending
	}
	if e.Data == nil {
		e.Data = []byte{}
	}
	return e
}

// toEvent converts a read of an event with its derived status (the
// event_states view).
func toEvent(row sqlcgen.EventState) domain.Event {
	return domain.Event{
		ID:             row.ID,
		Type:           row.Type,
		Source:         row.Source,
		Data:           row.Data,
		OrderingKey:    row.OrderingKey,
		IdempotencyKey: row.IdempotencyKey.String,
		Status:         domain.EventStatus(row.Status),
		FailureReason:  row.FailureReason,
		CreatedAt:      row.CreatedAt.UTC(),
	}
}

// claimedEvent converts the event row a claim reads. Its status is pending
// by construction: the delivery just claimed is not terminal.
func claimedEvent(row sqlcgen.Event) domain.Event {
	return toEvent(sqlcgen.EventState{
		ID:             row.ID,
		Type:           row.Type,
		Source:         row.Source,
		Data:           row.Data,
		OrderingKey:    row.OrderingKey,
		IdempotencyKey: row.IdempotencyKey,
		Status:         string(domain.EventPending),
		CreatedAt:      row.CreatedAt,
	})
}

// toDelivery converts a delivery row. A pending or retrying delivery that
// holds a lease is delivering until the lease's end (migration 00006).
func toDelivery(row sqlcgen.Delivery) domain.Delivery {
	status, next := domain.DeliveryStatus(row.Status), row.NextAttemptAt
	if row.LeaseUntil.Valid && (status == domain.DeliveryPending || status == domain.DeliveryRetrying) {
		status, next = domain.DeliveryDelivering, row.LeaseUntil.Time
	}
	return domain.Delivery{
		ID:             row.ID,
		EventID:        row.EventID,
		SubscriptionID: row.SubscriptionID,
		Status:         status,
		Attempts:       int(row.Attempts),
		NextAttemptAt:  next.UTC(),
		LastStatusCode: int(row.LastStatusCode.Int32),
		LastError:      row.LastError,
		Reason:         row.Reason,
		OrderingKey:    row.OrderingKey,
		CreatedAt:      row.CreatedAt.UTC(),
		UpdatedAt:      row.UpdatedAt.UTC(),
	}
}

func toAttempt(row sqlcgen.Attempt) domain.Attempt {
	return domain.Attempt{
		DeliveryID:     row.DeliveryID,
		SubscriptionID: row.SubscriptionID,
		Number:         int(row.Attempt),
		StatusCode:     int(row.StatusCode.Int32),
		ResponseBody:   string(row.ResponseBody),
		Error:          row.Error,
		Duration:       fromInterval(row.Duration),
		CreatedAt:      row.CreatedAt.UTC(),
	}
}

// optionalText stores "" as NULL, for columns where NULL means "none" and
// must not collide (idempotency keys).
func optionalText(s string) pgtype.Text {
	return pgtype.Text{String: s, Valid: s != ""}
}

// storedTime is t as PostgreSQL keeps it: UTC, microsecond precision
// (pgx truncates when it encodes). Values handed back without a read, such
// as UpdateSubscription's result, go through it to match a later read.
func storedTime(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.UTC().Truncate(time.Microsecond)
}

// optionalTime stores the zero time as NULL.
func optionalTime(t time.Time) pgtype.Timestamptz {
	return pgtype.Timestamptz{Time: t, Valid: !t.IsZero()}
}

func fromOptionalTime(t pgtype.Timestamptz) time.Time {
	if !t.Valid {
		return time.Time{}
	}
	return t.Time.UTC()
}

// interval stores a duration at PostgreSQL's microsecond precision.
func interval(d time.Duration) pgtype.Interval {
	return pgtype.Interval{Microseconds: d.Microseconds(), Valid: true}
}

// fromInterval reads an interval; days and months appear only if someone
// edited the row by hand, and count as 24 h and 30 days as PostgreSQL does.
func fromInterval(iv pgtype.Interval) time.Duration {
	const day = 24 * time.Hour
	return time.Duration(iv.Microseconds)*time.Microsecond +
		time.Duration(iv.Days)*day + time.Duration(iv.Months)*30*day
}

// validText makes s storable in a text column, which refuses NUL and
// invalid UTF-8. Error messages can quote bytes from the network, and losing
// a byte of one beats failing to record the attempt.
func validText(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	return strings.ReplaceAll(s, "\x00", "\uFFFD")
}

// nonNil turns a nil slice into an empty one: pgx sends nil as NULL, and
// the array parameters and columns here are NOT NULL.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
