package domain

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// ID prefixes name what an identifier refers to, Stripe-style, so a stray id
// in a log or a support ticket says what it is.
const (
	EventIDPrefix        = "evt_"
	SubscriptionIDPrefix = "sub_"
	DeliveryIDPrefix     = "dlv_"
)

// crockford is the Crockford base32 alphabet: no I, L, O or U, so ids survive
// being read aloud and copied by hand.
const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// NewID returns prefix followed by a 26-character ULID: 48 bits of
// millisecond time then 80 random bits. Ids sort by creation time, which
// keeps B-tree inserts append-only and makes cursor pagination follow
// creation order. random is usually crypto/rand.Reader.
func NewID(prefix string, now time.Time, random io.Reader) (string, error) {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(now.UnixMilli())<<16)
	if _, err := io.ReadFull(random, b[6:]); err != nil {
		return "", err
	}
	return prefix + encodeULID(b), nil
}

// MustNewID returns a new id from the process's monotonic source: ids made
// in one process sort in the order they were made, even within one
// millisecond (the ULID monotonic rule: the random part is incremented).
// crypto/rand does not fail on supported platforms, so an error there is a
// broken machine.
func MustNewID(prefix string, now time.Time) string {
	return prefix + processIDs.next(now)
}

// monotonicIDs hands out ULIDs in strictly increasing order.
type monotonicIDs struct {
	mu   sync.Mutex
	last [16]byte
}

var processIDs monotonicIDs

func (m *monotonicIDs) next(now time.Time) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(now.UnixMilli())<<16)
	if _, err := io.ReadFull(rand.Reader, b[6:]); err != nil {
		panic("domain: system random source failed: " + err.Error())
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if bytes.Compare(b[:6], m.last[:6]) <= 0 {
		// Same (or an earlier) millisecond: continue from the last id.
		b = m.last
		for i := 15; i >= 6; i-- {
			b[i]++
			if b[i] != 0 {
				break
			}
		}
	}
	m.last = b
	return encodeULID(b)
}

func encodeULID(b [16]byte) string {
	// 128 bits → 26 base32 digits, most significant first (the first digit
	// carries only 3 bits).
	hi := binary.BigEndian.Uint64(b[:8])
	lo := binary.BigEndian.Uint64(b[8:])
	var out [26]byte
	for i := 25; i >= 0; i-- {
		out[i] = crockford[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(out[:])
}

// IsID reports whether s is an id with prefix: the prefix then 26 Crockford
// base32 digits, the first at most 7. Stream entries and path parameters are
// checked with it before anything is looked up.
func IsID(prefix, s string) bool {
	rest, ok := strings.CutPrefix(s, prefix)
	if !ok || len(rest) != 26 || rest[0] > '7' {
		return false
	}
	for i := 0; i < len(rest); i++ {
		if strings.IndexByte(crockford, rest[i]) < 0 {
			return false
		}
	}
	return true
}

// ulidTimeDigits is how many leading digits of a ULID hold its 48-bit
// millisecond time: the first digit carries 3 bits, the next nine 5 each.
const ulidTimeDigits = 10

// IDTime returns the time an id was made at: the milliseconds in the first
// 48 bits of its ULID. It fails when id is not an id with prefix (IsID).
func IDTime(prefix, id string) (time.Time, error) {
	if !IsID(prefix, id) {
		return time.Time{}, fmt.Errorf("%w: %q is not an id with prefix %q", ErrInvalidID, id, prefix)
	}
	var ms uint64
	for _, c := range []byte(id[len(prefix) : len(prefix)+ulidTimeDigits]) {
		ms = ms<<5 | uint64(strings.IndexByte(crockford, c))
	}
	return time.UnixMilli(int64(ms)).UTC(), nil
}

// IDBound returns the smallest id with prefix made at t or later: the ULID
// of t's millisecond with an all-zero rest. Time-partitioned tables bound
// their windows with it, so that [IDBound(t0), IDBound(t1)) holds exactly
// the ids made in [t0, t1), in byte order.
func IDBound(prefix string, t time.Time) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(t.UnixMilli())<<16)
	return prefix + encodeULID(b)
}

// DeliveryID returns the id of event eventID's delivery to subscription
// subscriptionID: a ULID whose time is the event id's and whose other 80
// bits are the first 10 bytes of SHA-256 over both ids. The same pair
// always gets the same id, so the primary key alone keeps an event to one
// delivery per subscription (the unique index on the pair cannot exist on a
// table partitioned by id), and a delivery falls in its event's time
// window, so an event and everything about it age out together. Deliveries
// of one event sort by the hash, not by when they were made; nothing needs
// them in creation order, and pages by id still follow the events' order.
// When eventID is not an event id (it always is in stored events) the time
// is fallback's.
func DeliveryID(eventID, subscriptionID string, fallback time.Time) string {
	at, err := IDTime(EventIDPrefix, eventID)
	if err != nil {
		at = fallback
	}
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(at.UnixMilli())<<16)
	h := sha256.New()
	h.Write([]byte(eventID))
	h.Write([]byte{0}) // ids hold no NUL: the pair is unambiguous
	h.Write([]byte(subscriptionID))
	copy(b[6:], h.Sum(nil))
	return DeliveryIDPrefix + encodeULID(b)
}
