package domain

import (
	"errors"
	"fmt"
)

// ErrNotFound is returned when the requested subscription, event or delivery
// does not exist.
var ErrNotFound = errors.New("not found")

// ErrConflict is returned when a write conflicts with the current state, for
// example retrying a delivery that is already delivered.
var ErrConflict = errors.New("conflict")

// ErrInvalidID is returned (wrapped) when a string is not an id of the
// expected kind.
var ErrInvalidID = errors.New("invalid id")

// ValidationError reports one invalid input field. Field is the JSON name of
// the field (with a dotted path for nested fields), Message says what was
// wrong with which value.
type ValidationError struct {
	// In is where the field is in a request: "" for the body, InHeader
	// for a header (Field is then the header's name).
	In      string
	Field   string
	Message string
}

// InHeader is ValidationError.In for a request header.
const InHeader = "header"

// Error renders the field and what was wrong with it.
func (e *ValidationError) Error() string {
	return fmt.Sprintf("%s: %s", e.Field, e.Message)
}

// invalid builds a ValidationError with a formatted message.
func invalid(field, format string, args ...any) error {
	return &ValidationError{Field: field, Message: fmt.Sprintf(format, args...)}
}

// ErrForbiddenDestination is returned (wrapped) when an endpoint's address is
// refused by the SSRF guard: loopback, private, link-local and similar
// addresses, unless configuration allows them. It is a permanent failure.
var ErrForbiddenDestination = errors.New("destination address is not allowed")
