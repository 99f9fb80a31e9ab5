package postgres

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/dispatch-webhooks/dispatch/adapters/keyring"
	"github.com/dispatch-webhooks/dispatch/adapters/postgres/sqlcgen"
	"github.com/dispatch-webhooks/dispatch/domain"
)

// This file maps sqlc rows to domain values and back; nothing outside it
// knows how a domain field is laid out in a column.

// subscriptionRow lays sub out as its table row, its secrets and headers
// sealed under ring's first key when ring has keys (see sealText).
func subscriptionRow(ring *keyring.Ring, sub domain.Subscription) (sqlcgen.Subscription, error) {
	policy, err := marshalRetryPolicy(sub.RetryPolicy)
	if err != nil {
		return sqlcgen.Subscription{}, err
	}
	secret, err := sealText(ring, sub.ID, columnSecret, revealSecret(sub.Secret))
	if err != nil {
		return sqlcgen.Subscription{}, err
	}
	previous, err := sealText(ring, sub.ID, columnPreviousSecret, revealSecret(sub.PreviousSecret))
	if err != nil {
		return sqlcgen.Subscription{}, err
	}
	headersJSON, err := sealHeaders(ring, sub.ID, sub.Headers)
	if err != nil {
		return sqlcgen.Subscription{}, err
	}
	return sqlcgen.Subscription{
		ID:                      sub.ID,
		Url:                     sub.URL,
		EventTypes:              nonNil(sub.EventTypes),
		Description:             sub.Description,
		Secret:                  secret,
		PreviousSecret:          previous,
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

// toSubscription rehydrates a subscription row, opening its sealed columns
// with ring. It fails on a row this package did not write (a secret or JSON
// column it cannot read), and on one sealed under a key ring lacks.
func toSubscription(ring *keyring.Ring, row sqlcgen.Subscription) (domain.Subscription, error) {
	parts, err := decodeSubscriptionParts(ring, row)
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

func decodeSubscriptionParts(ring *keyring.Ring, row sqlcgen.Subscription) (subscriptionParts, error) {
	secret, err := openSecret(ring, row.ID, columnSecret, row.Secret)
	if err != nil {
		return subscriptionParts{}, fmt.Errorf("subscription %s: secret: %w", row.ID, err)
	}
	previous, err := openSecret(ring, row.ID, columnPreviousSecret, row.PreviousSecret)
	if err != nil {
		return subscriptionParts{}, fmt.Errorf("subscription %s: previous secret: %w", row.ID, err)
	}
	policy, err := unmarshalRetryPolicy(row.RetryPolicy)
	if err != nil {
		return subscriptionParts{}, fmt.Errorf("subscription %s: %w", row.ID, err)
	}
	headers, err := openHeaders(ring, row.ID, row.Headers)
	if err != nil {
		return subscriptionParts{}, fmt.Errorf("subscription %s: headers: %w", row.ID, err)
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

func toSubscriptions(ring *keyring.Ring, rows []sqlcgen.Subscription) ([]domain.Subscription, error) {
	out := make([]domain.Subscription, len(rows))
	for i, row := range rows {
		sub, err := toSubscription(ring, row)
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

// The sealed columns of a subscription row. A value is sealed with its
// row's id and its column as associated data, so one copied to another
// row or column does not open.
//
// Without keys, values are stored in the clear as before encryption
// existed; with keys, rows written in the clear still read (a sealed value
// starts with keyring.Prefix, a secret in the clear with whsec_, headers in
// the clear are a JSON object and sealed ones a JSON string), and `dispatch
// reencrypt` seals them.
const (
	columnSecret         = "secret"
	columnPreviousSecret = "previous_secret"
	columnHeaders        = "headers"
)

// sealContext is what a sealed value of a subscription's column is bound to.
func sealContext(id, column string) string {
	return "subscriptions/" + id + "/" + column
}

// sealText is the stored form of a text column's value: sealed when ring
// has keys, else value itself. "" (no previous secret) stays "".
func sealText(ring *keyring.Ring, id, column, value string) (string, error) {
	if value == "" || !ring.Enabled() {
		return value, nil
	}
	sealed, err := ring.Seal([]byte(value), sealContext(id, column))
	if err != nil {
		return "", fmt.Errorf("seal %s: %w", column, err)
	}
	return sealed, nil
}

// openText reads what sealText stored.
func openText(ring *keyring.Ring, id, column, stored string) (string, error) {
	if !keyring.IsSealed(stored) {
		return stored, nil
	}
	plain, err := ring.Open(stored, sealContext(id, column))
	if err != nil {
		return "", err
	}
	return string(plain), nil
}

func openSecret(ring *keyring.Ring, id, column, stored string) (domain.Secret, error) {
	plain, err := openText(ring, id, column, stored)
	if err != nil {
		return domain.Secret{}, err
	}
	return parseSecret(plain)
}

// sealHeaders is the headers column: the JSON object of headers, or, when
// ring has keys and there are headers, that object sealed, as a JSON
// string. Names are sealed with the values: nothing reads them in the
// database.
func sealHeaders(ring *keyring.Ring, id string, headers map[string]string) ([]byte, error) {
	if headers == nil {
		headers = map[string]string{}
	}
	object, err := json.Marshal(headers)
	if err != nil {
		return nil, fmt.Errorf("encode headers: %w", err)
	}
	if len(headers) == 0 || !ring.Enabled() {
		return object, nil
	}
	sealed, err := sealText(ring, id, columnHeaders, string(object))
	if err != nil {
		return nil, err
	}
	return json.Marshal(sealed)
}

// openHeaders reads what sealHeaders stored.
func openHeaders(ring *keyring.Ring, id string, stored []byte) (map[string]string, error) {
	object := stored
	var sealed string
	if json.Unmarshal(stored, &sealed) == nil {
		if !keyring.IsSealed(sealed) {
			return nil, errors.New("a JSON string that is not sealed")
		}
		plain, err := openText(ring, id, columnHeaders, sealed)
		if err != nil {
			return nil, err
		}
		object = []byte(plain)
	}
	headers := map[string]string{}
	if err := json.Unmarshal(object, &headers); err != nil {
		return nil, err
	}
	if headers == nil { // a JSON null
		headers = map[string]string{}
	}
	return headers, nil
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
