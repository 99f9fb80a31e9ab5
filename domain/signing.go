package domain

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"
)

// Standard Webhooks (https://www.standardwebhooks.com) signing, SPEC §3:
//
//	webhook-signature: v1,<base64 HMAC-SHA256(key, id + "." + timestamp + "." + body)>
//
// with one space-separated entry per signing secret, so a receiver keeps
// verifying during a secret rotation whichever of the two secrets it holds.

// SecretPrefix starts the textual form of every signing secret.
const SecretPrefix = "whsec_"

// Secret key sizes. 24 bytes (192 bits) is what Svix and the Standard
// Webhooks examples issue; HMAC-SHA256 gains nothing from keys longer than
// its 64-byte block, which it would first hash down.
const (
	MinSecretKeyLen = 24
	MaxSecretKeyLen = 64
	// generatedSecretKeyLen is 256 bits, the HMAC-SHA256 output size.
	generatedSecretKeyLen = 32
)

// DefaultSignatureTolerance is how far a webhook-timestamp may be from the
// verifier's clock, as in the Standard Webhooks reference libraries. It
// bounds how long a captured request can be replayed.
const DefaultSignatureTolerance = 5 * time.Minute

// signatureVersion tags an HMAC-SHA256 signature; other versions (such as
// v1a, asymmetric) in a header are skipped, not rejected.
const signatureVersion = "v1,"

// signatureLen is the length of one "v1,<base64 of 32 bytes>" entry.
const signatureLen = len(signatureVersion) + (sha256.Size+2)/3*4

// Verification failures. Verify wraps them with detail, so compare with
// errors.Is.
var (
	// ErrMissingSignatureHeaders means webhook-id, webhook-timestamp or
	// webhook-signature is empty.
	ErrMissingSignatureHeaders = errors.New("missing webhook-id, webhook-timestamp or webhook-signature")
	// ErrInvalidTimestamp means webhook-timestamp is not unix seconds written
	// as a plain decimal integer.
	ErrInvalidTimestamp = errors.New("webhook-timestamp is not unix seconds")
	// ErrTimestampOutOfTolerance means webhook-timestamp is too far in the
	// past (a replay, or a clock far behind) or in the future.
	ErrTimestampOutOfTolerance = errors.New("webhook-timestamp is outside the tolerance")
	// ErrInvalidSignature means no v1 signature in webhook-signature matches
	// any of the secrets: the body, id or timestamp was altered, or the
	// receiver holds another secret.
	ErrInvalidSignature = errors.New("no matching webhook signature")
)

// Secret is a subscription's signing key. The key is unexported and the
// type formats itself redacted (String, GoString, Format, LogValue), so a
// subscription can be logged or printed with %+v without leaking it; Reveal
// returns the whsec_ form for the few answers and stores that need it.
type Secret struct{ key []byte }

// ParseSecret parses "whsec_<standard base64 of a 24..64-byte key>". It
// accepts exactly the strings Reveal produces, so a secret read back from a
// store is byte-for-byte the one the subscriber was given.
func ParseSecret(s string) (Secret, error) {
	encoded, ok := strings.CutPrefix(s, SecretPrefix)
	if !ok {
		return Secret{}, errors.New("secret must start with " + SecretPrefix)
	}
	// encoding/base64 silently skips CR and LF; refuse them so that parsing
	// and Reveal round-trip exactly.
	if strings.ContainsAny(encoded, "\r\n") {
		return Secret{}, errors.New("secret key must be standard base64 without line breaks")
	}
	// Strict rejects non-zero padding bits: every key has one spelling.
	key, err := base64.StdEncoding.Strict().DecodeString(encoded)
	if err != nil {
		return Secret{}, fmt.Errorf("secret key must be standard base64: %v", err)
	}
	if len(key) < MinSecretKeyLen || len(key) > MaxSecretKeyLen {
		return Secret{}, fmt.Errorf("secret key must be %d..%d bytes, got %d", MinSecretKeyLen, MaxSecretKeyLen, len(key))
	}
	return Secret{key: key}, nil
}

// GenerateSecret returns a new 32-byte secret read from random (normally
// crypto/rand.Reader; tests pass a fixed stream).
func GenerateSecret(random io.Reader) (Secret, error) {
	key := make([]byte, generatedSecretKeyLen)
	if _, err := io.ReadFull(random, key); err != nil {
		return Secret{}, fmt.Errorf("generate secret: %w", err)
	}
	return Secret{key: key}, nil
}

// MustGenerateSecret is GenerateSecret with crypto/rand; the system random
// source does not fail on supported platforms, so an error there is a broken
// machine.
func MustGenerateSecret() Secret {
	s, err := GenerateSecret(rand.Reader)
	if err != nil {
		panic("domain: system random source failed: " + err.Error())
	}
	return s
}

// IsZero reports whether s is unset (the zero Secret signs nothing).
func (s Secret) IsZero() bool { return len(s.key) == 0 }

// Equal reports whether s and other are the same key, in constant time.
func (s Secret) Equal(other Secret) bool {
	return subtle.ConstantTimeCompare(s.key, other.key) == 1
}

// Reveal returns the whsec_ form of s, or "" for the zero Secret. Call it
// only where the secret must leave the process: the API answers that show
// it, and the store.
func (s Secret) Reveal() string {
	if s.IsZero() {
		return ""
	}
	return SecretPrefix + base64.StdEncoding.EncodeToString(s.key)
}

// redacted is how a set secret prints everywhere except Reveal.
const redacted = SecretPrefix + "***"

// String returns "whsec_***" (or "" for the zero Secret): it is what %v, %s
// and every other fmt verb print.
func (s Secret) String() string {
	if s.IsZero() {
		return ""
	}
	return redacted
}

// GoString keeps %#v from printing the key bytes.
func (s Secret) GoString() string {
	return "domain.Secret{" + strconv.Quote(s.String()) + "}"
}

// Format routes every fmt verb (%x and %d included, which would otherwise
// print the key's bytes) through String or GoString.
func (s Secret) Format(f fmt.State, verb rune) {
	if verb == 'v' && f.Flag('#') {
		io.WriteString(f, s.GoString())
		return
	}
	io.WriteString(f, s.String())
}

// LogValue redacts s in slog output, whatever the handler.
func (s Secret) LogValue() slog.Value {
	return slog.StringValue(s.String())
}

// Sign returns the webhook-signature header value for a message signed at
// ts: "v1,<sig>" for each non-zero secret, space-separated. Zero secrets are
// skipped rather than signing with an empty key.
//
// It sits on the delivery hot path: it never copies body (which can be
// 256 KiB), and besides crypto/hmac's state per secret it allocates one
// scratch buffer and the returned string.
func Sign(secrets []Secret, msgID string, ts time.Time, body []byte) string {
	// "<id>.<unix>." with spare room for the MAC: hash.Hash is an interface,
	// so every slice passed to it escapes; one buffer serves all of them.
	scratch := make([]byte, 0, len(msgID)+len(".-9223372036854775808.")+sha256.Size)
	scratch = append(scratch, msgID...)
	scratch = append(scratch, '.')
	scratch = strconv.AppendInt(scratch, ts.Unix(), 10)
	scratch = append(scratch, '.')
	prefix := scratch

	var out strings.Builder
	out.Grow(len(secrets) * (signatureLen + 1))
	var encoded [signatureLen - len(signatureVersion)]byte
	for _, s := range secrets {
		if s.IsZero() {
			continue
		}
		sum := s.mac(prefix[len(prefix):], prefix, body)
		if out.Len() > 0 {
			out.WriteByte(' ')
		}
		out.WriteString(signatureVersion)
		out.Write(base64.StdEncoding.AppendEncode(encoded[:0], sum))
	}
	return out.String()
}

// mac appends HMAC-SHA256(key, signedPrefix || body) to dst. The signed
// content is "<id>.<timestamp>.<body>"; signedPrefix is everything but body.
func (s Secret) mac(dst, signedPrefix, body []byte) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write(signedPrefix)
	m.Write(body)
	return m.Sum(dst)
}

// Verify checks a webhook as a receiver would, with the header values as
// received: it accepts when any v1 entry of signatureHeader matches any
// secret, and the timestamp is within tolerance of now (tolerance <= 0 means
// DefaultSignatureTolerance). Comparisons are constant-time. The error wraps
// one of ErrMissingSignatureHeaders, ErrInvalidTimestamp,
// ErrTimestampOutOfTolerance or ErrInvalidSignature.
//
// Dispatch itself only signs; Verify exists for tests, tools and receivers
// written in Go, and proves that Sign's output is verifiable.
func Verify(secrets []Secret, msgID, timestamp string, body []byte, signatureHeader string, now time.Time, tolerance time.Duration) error {
	if msgID == "" || timestamp == "" || signatureHeader == "" {
		return ErrMissingSignatureHeaders
	}
	unix, err := strconv.ParseInt(timestamp, 10, 64)
	// The signed content holds the header text verbatim; refusing "+12" or
	// "012" keeps "the timestamp we checked" and "the timestamp that was
	// signed" the same string.
	if err != nil || strconv.FormatInt(unix, 10) != timestamp {
		return fmt.Errorf("%w: %q", ErrInvalidTimestamp, timestamp)
	}
	if tolerance <= 0 {
		tolerance = DefaultSignatureTolerance
	}
	// Compare in seconds: time.Unix of a huge value would overflow Duration.
	skew := now.Unix() - unix
	if skew > int64(tolerance/time.Second) || -skew > int64(tolerance/time.Second) {
		return fmt.Errorf("%w: timestamp %d is %ds from now, tolerance %s", ErrTimestampOutOfTolerance, unix, -skew, tolerance)
	}
	prefix := []byte(msgID + "." + timestamp + ".")
	expected := make([][]byte, 0, len(secrets))
	for _, s := range secrets {
		if !s.IsZero() {
			expected = append(expected, base64.StdEncoding.AppendEncode(nil, s.mac(nil, prefix, body)))
		}
	}
	for entry := range strings.SplitSeq(signatureHeader, " ") {
		sig, ok := strings.CutPrefix(entry, signatureVersion)
		if !ok {
			continue
		}
		for _, want := range expected {
			// Returning on the first match leaks only that some entry
			// matched, which the caller learns anyway.
			if subtle.ConstantTimeCompare([]byte(sig), want) == 1 {
				return nil
			}
		}
	}
	return ErrInvalidSignature
}
