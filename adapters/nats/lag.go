package nats

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/dispatch-webhooks/dispatch/ports"
)

// Lag reads the group's consumer: entries it has not delivered yet
// (NumPending) and those delivered but not acknowledged (NumAckPending).
// Without a consumer yet, every entry of the stream is unread.
func (q *Queue) Lag(ctx context.Context, stream, group string) (ports.GroupLag, error) {
	if err := checkNames(stream, group); err != nil {
		return ports.GroupLag{}, err
	}
	name := q.StreamName(stream)
	c, err := q.js.Consumer(ctx, name, group)
	switch {
	case err == nil:
		info := c.CachedInfo()
		return ports.GroupLag{Unread: int64(info.NumPending), Pending: int64(info.NumAckPending)}, nil
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return ports.GroupLag{}, nil
	case !errors.Is(err, jetstream.ErrConsumerNotFound):
		return ports.GroupLag{}, fmt.Errorf("nats queue: lag of %s on %s: %w", group, name, err)
	}
	s, err := q.js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return ports.GroupLag{}, nil
	}
	if err != nil {
		return ports.GroupLag{}, fmt.Errorf("nats queue: lag of %s on %s: %w", group, name, err)
	}
	return ports.GroupLag{Unread: int64(s.CachedInfo().State.Msgs)}, nil
}
