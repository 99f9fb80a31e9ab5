package application

import "errors"

// ErrEnqueueDeferred marks a failure to append committed work to a stream.
// Nothing is lost: the scheduler re-enqueues from PostgreSQL state, so the
// input that caused it may be acknowledged.
var ErrEnqueueDeferred = errors.New("enqueue deferred to the scheduler")
