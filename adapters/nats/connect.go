package nats

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
)

// Connect connects to the NATS server at url and checks it answers within
// ctx. The connection reconnects by itself for as long as it lives; the
// caller closes it.
func Connect(ctx context.Context, url string) (*nats.Conn, error) {
	if url == "" {
		return nil, errors.New("nats: url is empty")
	}
	nc, err := nats.Connect(url,
		nats.Name("dispatch"),
		nats.MaxReconnects(-1),
		nats.RetryOnFailedConnect(false),
	)
	if err != nil {
		return nil, fmt.Errorf("nats: connect: %w", err)
	}
	if err := nc.FlushWithContext(ctx); err != nil {
		nc.Close()
		return nil, fmt.Errorf("nats: connect: %w", err)
	}
	return nc, nil
}
