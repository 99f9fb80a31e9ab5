package postgres

import (
	"bytes"
	"sync"
	"sync/atomic"

	"github.com/dispatch-webhooks/dispatch/adapters/keyring"
	"github.com/dispatch-webhooks/dispatch/adapters/postgres/sqlcgen"
	"github.com/dispatch-webhooks/dispatch/domain"
)

// maxDecodedSubscriptions bounds decodedSubscriptions: past it, the memo
// starts over empty. A worker that delivers to more subscriptions than
// this at once decodes some rows twice, no more.
const maxDecodedSubscriptions = 10_000

// decodedSubscriptions is the worker's memo of subscription rows it has
// decoded. Every claim returns its delivery's subscription row, and
// decoding its secrets and JSON columns anew for every delivery was ~5 %
// of a worker's CPU in a fan-out run. The row itself still comes from the
// claim's statement, and the memo's parts are used only when the columns
// they were decoded from are byte for byte the row's: a changed secret,
// retry policy or header is decoded on the first claim that reads it.
type decodedSubscriptions struct {
	parts sync.Map // subscription id → *decodedParts
	size  atomic.Int64
}

// decodedParts are a row's decoded parts with the columns they came from.
// The parts are shared by every claim that reuses them, so nothing may
// modify them (a domain.Subscription's maps and slices are read-only by
// convention).
type decodedParts struct {
	secret, previousSecret string
	retryPolicy, headers   []byte
	decoded                subscriptionParts
}

// subscription is toSubscription(ring, row), from the memo when row's
// secrets, retry policy and headers are those it last decoded for row.ID
// (sealed columns compared as stored: a value sealed again is opened again).
func (d *decodedSubscriptions) subscription(ring *keyring.Ring, row sqlcgen.Subscription) (domain.Subscription, error) {
	if v, ok := d.parts.Load(row.ID); ok {
		p := v.(*decodedParts)
		if p.secret == row.Secret && p.previousSecret == row.PreviousSecret &&
			bytes.Equal(p.retryPolicy, row.RetryPolicy) && bytes.Equal(p.headers, row.Headers) {
			return assembleSubscription(row, p.decoded), nil
		}
	}
	decoded, err := decodeSubscriptionParts(ring, row)
	if err != nil {
		return domain.Subscription{}, err
	}
	if d.size.Add(1) > maxDecodedSubscriptions {
		d.parts.Clear()
		d.size.Store(1)
	}
	d.parts.Store(row.ID, &decodedParts{
		secret: row.Secret, previousSecret: row.PreviousSecret,
		retryPolicy: bytes.Clone(row.RetryPolicy), headers: bytes.Clone(row.Headers),
		decoded: decoded,
	})
	return assembleSubscription(row, decoded), nil
}
