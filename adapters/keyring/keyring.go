// Package keyring seals values at rest with AES-256-GCM under a ring of
// keys: the first key seals, every key opens, so an operator rotates keys
// by putting a new one first, rewriting the stored values under it, then
// dropping the old one. A sealed value names the key that sealed it, so
// opening picks the key without trying each.
//
// It knows nothing of what it seals: a store says which row and column a
// value belongs to (the associated data), so a value copied to another row
// or column does not open there.
//
// Rule of dependency: imports the standard library only; bootstrap parses
// the configured keys with it and store adapters seal with it.
package keyring

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// KeySize is the length of a key in bytes (AES-256).
const KeySize = 32

// Prefix starts every sealed value, in front of its base64 body. Its "v1"
// is the format's version: a later format gets another prefix, and values
// of both can be opened side by side. Nothing written in the clear starts
// with it where this package is used (a whsec_ secret, a JSON object), so
// stored values sealed and in the clear can be told apart.
const Prefix = "enc:v1:"

// keyIDSize is how many bytes of a key's hash name it in a sealed value:
// enough to tell apart the few keys of a ring (Parse refuses a ring where
// two collide), too few to say anything about the key.
const keyIDSize = 4

// keyIDContext separates the key-id hash from any other use of the key.
const keyIDContext = "dispatch keyring key id\x00"

// ErrUnknownKey is returned (wrapped) by Open for a value sealed under a
// key that is not in the ring.
var ErrUnknownKey = errors.New("sealed under a key that is not in DISPATCH_ENCRYPTION_KEYS")

// ErrNotAuthentic is returned (wrapped) by Open when a value does not open
// under its key: it was altered, or belongs to another row or column.
var ErrNotAuthentic = errors.New("does not open under its key: altered, or moved from another row or column")

// ErrMalformed is returned (wrapped) by Open for a value that is not in the
// sealed format.
var ErrMalformed = errors.New("not a sealed value")

// ErrNoKeys is returned by Seal and Open on a ring without keys.
var ErrNoKeys = errors.New("no encryption keys configured (DISPATCH_ENCRYPTION_KEYS)")

// Ring is an ordered list of keys. The zero Ring, and a nil *Ring, have no
// keys: Enabled reports false and Seal and Open fail. A Ring is safe for
// concurrent use.
type Ring struct {
	keys []key
}

type key struct {
	id   [keyIDSize]byte
	aead cipher.AEAD
}

// Parse reads a comma-separated list of standard base64 keys of KeySize
// bytes each, as DISPATCH_ENCRYPTION_KEYS holds it; spaces around a key
// are ignored. An empty list is a ring without keys. Errors name the
// key by its position, never its value.
func Parse(list string) (*Ring, error) {
	if strings.TrimSpace(list) == "" {
		return &Ring{}, nil
	}
	var keys [][]byte
	for i, field := range strings.Split(list, ",") {
		field = strings.TrimSpace(field)
		if field == "" {
			return nil, fmt.Errorf("encryption key %d is empty", i+1)
		}
		k, err := base64.StdEncoding.Strict().DecodeString(field)
		if err != nil {
			return nil, fmt.Errorf("encryption key %d is not standard base64", i+1)
		}
		keys = append(keys, k)
	}
	return New(keys...)
}

// New returns a ring of keys, each KeySize bytes; the first seals.
func New(keys ...[]byte) (*Ring, error) {
	r := &Ring{keys: make([]key, 0, len(keys))}
	for i, k := range keys {
		if len(k) != KeySize {
			return nil, fmt.Errorf("encryption key %d must be %d bytes, got %d", i+1, KeySize, len(k))
		}
		id := keyID(k)
		for j, other := range r.keys {
			if other.id == id {
				return nil, fmt.Errorf("encryption key %d repeats key %d", i+1, j+1)
			}
		}
		block, err := aes.NewCipher(k)
		if err != nil {
			return nil, fmt.Errorf("encryption key %d: %w", i+1, err)
		}
		// Random 96-bit nonces, made and carried by the AEAD itself: safe
		// for far more values than a store of subscriptions ever seals
		// under one key.
		aead, err := cipher.NewGCMWithRandomNonce(block)
		if err != nil {
			return nil, fmt.Errorf("encryption key %d: %w", i+1, err)
		}
		r.keys = append(r.keys, key{id: id, aead: aead})
	}
	return r, nil
}

func keyID(k []byte) [keyIDSize]byte {
	sum := sha256.Sum256(append([]byte(keyIDContext), k...))
	return [keyIDSize]byte(sum[:keyIDSize])
}

// Enabled reports whether the ring has a key to seal with.
func (r *Ring) Enabled() bool {
	return r != nil && len(r.keys) > 0
}

// KeyIDs names the ring's keys, first (sealing) key first, in hex: what
// sealed values carry, safe to log.
func (r *Ring) KeyIDs() []string {
	if r == nil {
		return nil
	}
	ids := make([]string, len(r.keys))
	for i, k := range r.keys {
		ids[i] = hex.EncodeToString(k.id[:])
	}
	return ids
}

// IsSealed reports whether stored is in the sealed format (it may still
// fail to open).
func IsSealed(stored string) bool {
	return strings.HasPrefix(stored, Prefix)
}

// Seal encrypts plaintext under the ring's first key, bound to context
// (which row and column it is stored in; Open must be given the same), and
// returns it as Prefix followed by standard base64 of the key id, the
// nonce and the ciphertext with its tag.
func (r *Ring) Seal(plaintext []byte, context string) (string, error) {
	if !r.Enabled() {
		return "", ErrNoKeys
	}
	k := r.keys[0]
	body := make([]byte, keyIDSize, keyIDSize+len(plaintext)+k.aead.Overhead())
	copy(body, k.id[:])
	body = k.aead.Seal(body, nil, plaintext, associatedData(k.id, context))
	return Prefix + base64.StdEncoding.EncodeToString(body), nil
}

// Open decrypts a value Seal returned for the same context, under
// whichever key of the ring sealed it.
func (r *Ring) Open(sealed, context string) ([]byte, error) {
	encoded, ok := strings.CutPrefix(sealed, Prefix)
	if !ok {
		return nil, fmt.Errorf("%w: missing %q prefix", ErrMalformed, Prefix)
	}
	body, err := base64.StdEncoding.Strict().DecodeString(encoded)
	if err != nil {
		return nil, fmt.Errorf("%w: body is not standard base64", ErrMalformed)
	}
	if len(body) < keyIDSize {
		return nil, fmt.Errorf("%w: too short", ErrMalformed)
	}
	id := [keyIDSize]byte(body[:keyIDSize])
	if !r.Enabled() {
		return nil, fmt.Errorf("key %x: %w", id, ErrNoKeys)
	}
	k, ok := r.find(id)
	if !ok {
		return nil, fmt.Errorf("key %x: %w", id, ErrUnknownKey)
	}
	if len(body) < keyIDSize+k.aead.Overhead() {
		return nil, fmt.Errorf("%w: too short", ErrMalformed)
	}
	plaintext, err := k.aead.Open(nil, nil, body[keyIDSize:], associatedData(id, context))
	if err != nil {
		return nil, fmt.Errorf("key %x: %w", id, ErrNotAuthentic)
	}
	return plaintext, nil
}

// SealedByFirst reports whether stored was sealed under the ring's first
// key: whether a rewrite under the current key would leave it as it is.
func (r *Ring) SealedByFirst(stored string) bool {
	if !r.Enabled() {
		return false
	}
	encoded, ok := strings.CutPrefix(stored, Prefix)
	if !ok {
		return false
	}
	// The id is the body's first keyIDSize bytes, all inside the first
	// 8 characters of base64 (6 bytes).
	if len(encoded) < 8 {
		return false
	}
	head, err := base64.StdEncoding.DecodeString(encoded[:8])
	if err != nil || len(head) < keyIDSize {
		return false
	}
	return bytes.Equal(head[:keyIDSize], r.keys[0].id[:])
}

func (r *Ring) find(id [keyIDSize]byte) (key, bool) {
	for _, k := range r.keys {
		if k.id == id {
			return k, true
		}
	}
	return key{}, false
}

// associatedData binds a sealed value to the format, its key and the
// caller's context, so none of them can be changed without Open failing.
func associatedData(id [keyIDSize]byte, context string) []byte {
	ad := make([]byte, 0, len(Prefix)+keyIDSize+len(context))
	ad = append(ad, Prefix...)
	ad = append(ad, id[:]...)
	return append(ad, context...)
}
