package domain

import "time"

// DeliveryStatus is where a delivery is in its life.
type DeliveryStatus string

// Delivery statuses: pending → delivering → delivered | retrying → … | dead.
const (
	DeliveryPending    DeliveryStatus = "pending"
	DeliveryDelivering DeliveryStatus = "delivering"
	DeliveryRetrying   DeliveryStatus = "retrying"
	DeliveryDelivered  DeliveryStatus = "delivered"
	DeliveryDead       DeliveryStatus = "dead"
)

// Terminal reports whether no further attempt will be made on its own.
func (s DeliveryStatus) Terminal() bool {
	return s == DeliveryDelivered || s == DeliveryDead
}

// Reasons recorded on a delivery that was postponed without an attempt.
const (
	ReasonThrottled   = "throttled"
	ReasonCircuitOpen = "circuit_open"
)

// DefaultResponseBody is how much of an endpoint's response body an
// attempt keeps by default (DISPATCH_ATTEMPT_BODY_BYTES).
const DefaultResponseBody = 4096

// MaxResponseBody is the most of an endpoint's response body an attempt
// may be set to keep: an answer's first 64 KiB tell what went wrong.
const MaxResponseBody = 64 << 10

// Delivery is one event on its way to one subscription.
type Delivery struct {
	ID             string
	EventID        string
	SubscriptionID string
	Status         DeliveryStatus
	// Attempts counts the attempts made so far.
	Attempts int
	// NextAttemptAt is when the next attempt may be made.
	NextAttemptAt  time.Time
	LastStatusCode int
	LastError      string
	// Reason says why the delivery was last postponed without an attempt
	// (throttled, circuit_open); empty otherwise.
	Reason string
	// OrderingKey is the resolved key (empty when unordered).
	OrderingKey string
	CreatedAt   time.Time
	UpdatedAt   time.Time
	// ReservedUntil, when its creator sets it on a new delivery, reserves
	// the delivery until then for whoever holds the queue entry the creator
	// appends: nobody else claims it meanwhile, so that holder may attempt
	// it without a claim of its own (ports.DeliveryClaims.TakeDelivery).
	// Stores keep it only from creation to the first claim or outcome and
	// never return it.
	ReservedUntil time.Time
}

// NewDelivery returns a pending delivery of event to sub, due at once.
func NewDelivery(event Event, sub Subscription, now time.Time) Delivery {
	return NewDeliveryTo(event, sub.Subscriber(), now)
}

// NewDeliveryTo is NewDelivery for a subscription found in a
// SubscriptionIndex.
func NewDeliveryTo(event Event, to Subscriber, now time.Time) Delivery {
	now = now.UTC().Truncate(time.Microsecond)
	return Delivery{
		ID:             DeliveryID(event.ID, to.ID, now),
		EventID:        event.ID,
		SubscriptionID: to.ID,
		Status:         DeliveryPending,
		NextAttemptAt:  now,
		OrderingKey:    OrderingKeyFor(Subscription{ID: to.ID, OrderingKey: to.OrderingKey}, event),
		CreatedAt:      now,
		UpdatedAt:      now,
	}
}

// Attempt is one HTTP exchange with an endpoint (or the failure to have one).
type Attempt struct {
	DeliveryID     string
	SubscriptionID string
	// Number is 1-based.
	Number       int
	StatusCode   int
	ResponseBody string
	Error        string
	Duration     time.Duration
	CreatedAt    time.Time
}
