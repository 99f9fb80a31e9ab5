package domain

import (
	"io"
	"time"
)

// Secret is a subscription's signing key. Its String and LogValue redact it;
// Reveal returns the whsec_ form for the few answers that show it.
type Secret struct{ key []byte }

// ParseSecret parses "whsec_<base64 key>".
func ParseSecret(s string) (Secret, error) { panic("TODO") }

// GenerateSecret returns a new random secret read from r.
func GenerateSecret(r io.Reader) (Secret, error) { panic("TODO") }

// MustGenerateSecret is GenerateSecret with crypto/rand.
func MustGenerateSecret() Secret { panic("TODO") }

// IsZero reports whether s is unset.
func (s Secret) IsZero() bool { return len(s.key) == 0 }

// Reveal returns the whsec_ form of s.
func (s Secret) Reveal() string { panic("TODO") }

// Sign returns the webhook-signature header value.
func Sign(secrets []Secret, msgID string, ts time.Time, body []byte) string { panic("TODO") }
