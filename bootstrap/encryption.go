package bootstrap

import (
	"context"
	"fmt"
	"log/slog"
	"os/signal"
	"syscall"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/fx"

	"github.com/dispatch-webhooks/dispatch/adapters/keyring"
	"github.com/dispatch-webhooks/dispatch/adapters/postgres"
)

// PlaintextWarning is what every process that stores subscriptions in
// PostgreSQL without DISPATCH_ENCRYPTION_KEYS logs at start and shows in
// /ready.
const PlaintextWarning = "DISPATCH_ENCRYPTION_KEYS is not set: subscription signing secrets and custom header values are stored in PostgreSQL in plaintext"

// encryptionKeysError is what Validate says of EncryptionKeys: nil, or
// which key is wrong and how (never its value).
func (c *Config) encryptionKeysError() error {
	if _, err := keyring.Parse(c.EncryptionKeys); err != nil {
		return fmt.Errorf("encryption-keys: %w", err)
	}
	return nil
}

// keysValue holds EncryptionKeys as a flag; it never shows them, not even
// as the flag's default in -h (which prints String()).
type keysValue string

func (v *keysValue) String() string     { return "" }
func (v *keysValue) Set(s string) error { *v = keysValue(s); return nil }

// readyWarnings are conditions /ready reports without failing: the
// process serves, but an operator should act.
type readyWarnings []string

// newKeyRing is the ring the PostgreSQL store seals with, from
// cfg.EncryptionKeys (Validate has accepted them). It says at start
// whether subscriptions' secrets are sealed, and warns when they are not.
func newKeyRing(cfg Config, log *slog.Logger) (*keyring.Ring, readyWarnings, error) {
	ring, err := keyring.Parse(cfg.EncryptionKeys)
	if err != nil {
		return nil, nil, fmt.Errorf("encryption-keys: %w", err)
	}
	if !ring.Enabled() {
		log.Warn(PlaintextWarning)
		return ring, readyWarnings{PlaintextWarning}, nil
	}
	ids := ring.KeyIDs()
	log.Info("subscription secrets and headers are encrypted at rest", "sealing_key_id", ids[0], "keys", len(ids))
	return ring, nil, nil
}

// noReadyWarnings is what a process without PostgreSQL reports (`dispatch
// dev`: its in-memory store keeps nothing at rest).
func noReadyWarnings() readyWarnings { return nil }

// reencryptOnStart is `dispatch reencrypt`: it seals every subscription row
// under the first key (postgres.Store.Reencrypt) and reports how many it
// rewrote. Each batch commits on its own, so an interrupted run (SIGINT,
// SIGTERM) keeps what it did and a later run goes on from there.
var reencryptOnStart = fx.Invoke(func(pool *pgxpool.Pool, ring *keyring.Ring, log *slog.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	n, err := postgres.New(pool, postgres.Encryption(ring)).Reencrypt(ctx, postgres.ReencryptBatch)
	if err != nil {
		return fmt.Errorf("reencrypt (%d rows rewritten before the error): %w", n, err)
	}
	log.Info("subscriptions reencrypted under the first key", "rewritten", n, "sealing_key_id", ring.KeyIDs()[0])
	return nil
})
