package domain

import (
	"crypto/rand"
	"encoding/binary"
	"io"
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

// MustNewID is NewID with crypto/rand; the system random source does not fail
// on supported platforms, so an error there is a broken machine.
func MustNewID(prefix string, now time.Time) string {
	id, err := NewID(prefix, now, rand.Reader)
	if err != nil {
		panic("domain: system random source failed: " + err.Error())
	}
	return id
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
