package postgres_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatch-webhooks/dispatch/adapters/keyring"
	"github.com/dispatch-webhooks/dispatch/adapters/postgres"
	"github.com/dispatch-webhooks/dispatch/adapters/postgres/pgtest"
	"github.com/dispatch-webhooks/dispatch/domain"
)

// testKey is a key made of one repeated byte, so tests can name keys.
func testKey(b byte) []byte { return bytes.Repeat([]byte{b}, keyring.KeySize) }

// testRing is a ring of the keys testKey(b) for each b, the first sealing.
func testRing(t *testing.T, bs ...byte) *keyring.Ring {
	t.Helper()
	keys := make([][]byte, len(bs))
	for i, b := range bs {
		keys[i] = testKey(b)
	}
	ring, err := keyring.New(keys...)
	require.NoError(t, err)
	return ring
}

// bearerToken is a custom header value that must never be stored in the
// clear.
const bearerToken = "Bearer secret-token-123"

// sealedSubscription is a subscription with both secrets and a credential
// in a custom header.
func sealedSubscription(t *testing.T) domain.Subscription {
	t.Helper()
	now := time.Now().UTC().Truncate(time.Microsecond)
	sub, err := domain.NewSubscription(domain.NewSubscriptionInput{
		URL:        "https://hooks.example.com/dispatch",
		EventTypes: []string{"order.*"},
		Headers:    map[string]string{"Authorization": bearerToken, "X-Tenant": "acme-corp"},
	}, now)
	require.NoError(t, err)
	require.NoError(t, sub.RotateSecret(domain.MustGenerateSecret(), now, time.Hour))
	return sub
}

// rawRows is every subscription row as PostgreSQL stores it, as text.
func rawRows(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	rows, err := pool.Query(t.Context(), "SELECT row_to_json(s)::text FROM subscriptions s")
	require.NoError(t, err)
	defer rows.Close()
	var all []string
	for rows.Next() {
		var row string
		require.NoError(t, rows.Scan(&row))
		all = append(all, row)
	}
	require.NoError(t, rows.Err())
	return strings.Join(all, "\n")
}

// assertNothingInTheClear checks that no secret of sub, in either of its
// spellings, and no header value appears in the stored rows.
func assertNothingInTheClear(t *testing.T, pool *pgxpool.Pool, sub domain.Subscription) {
	t.Helper()
	raw := rawRows(t, pool)
	require.Contains(t, raw, sub.ID, "the row is there")
	for _, secret := range []domain.Secret{sub.Secret, sub.PreviousSecret} {
		revealed := secret.Reveal()
		assert.NotContains(t, raw, revealed, "a signing secret in the clear")
		assert.NotContains(t, raw, strings.TrimPrefix(revealed, domain.SecretPrefix), "a signing key in base64")
	}
	assert.NotContains(t, raw, "secret-token-123", "a header value in the clear")
	assert.NotContains(t, raw, "acme-corp", "a header value in the clear")
}

func TestSecretsAndHeadersAreSealedAtRest(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	store := postgres.New(pool, postgres.Encryption(testRing(t, 1)))
	sub := sealedSubscription(t)
	require.NoError(t, store.CreateSubscription(t.Context(), sub))
	assertNothingInTheClear(t, pool, sub)

	got, err := store.GetSubscription(t.Context(), sub.ID)
	require.NoError(t, err)
	assert.True(t, got.Secret.Equal(sub.Secret) && got.PreviousSecret.Equal(sub.PreviousSecret), "the secrets read back")
	assert.Equal(t, sub.Headers, got.Headers)

	updated, err := store.UpdateSubscription(t.Context(), sub.ID, func(s *domain.Subscription) error {
		s.Headers = map[string]string{"Authorization": "Bearer secret-token-456"}
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, "Bearer secret-token-456", updated.Headers["Authorization"])
	assert.NotContains(t, rawRows(t, pool), "secret-token-456", "an update seals too")

	active, err := store.ActiveSubscriptions(t.Context())
	require.NoError(t, err)
	require.Len(t, active, 1)
	assert.Equal(t, updated.Headers, active[0].Headers)
}

func TestRowsInTheClearReadWithKeysAndReencryptSealsThem(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	clear := postgres.New(pool)
	subs := []domain.Subscription{sealedSubscription(t), sealedSubscription(t), sealedSubscription(t)}
	for _, sub := range subs {
		require.NoError(t, clear.CreateSubscription(t.Context(), sub))
	}
	require.Contains(t, rawRows(t, pool), "secret-token-123", "without keys, values are stored in the clear")

	sealed := postgres.New(pool, postgres.Encryption(testRing(t, 1)))
	got, err := sealed.GetSubscription(t.Context(), subs[0].ID)
	require.NoError(t, err, "a row written in the clear reads once keys are configured")
	assert.Equal(t, subs[0].Headers, got.Headers)

	n, err := sealed.Reencrypt(t.Context(), 2)
	require.NoError(t, err)
	assert.Equal(t, len(subs), n, "every row rewritten, across batches")
	for _, sub := range subs {
		assertNothingInTheClear(t, pool, sub)
		got, err := sealed.GetSubscription(t.Context(), sub.ID)
		require.NoError(t, err)
		assert.True(t, got.Secret.Equal(sub.Secret))
		assert.Equal(t, sub.Headers, got.Headers)
	}
	n, err = sealed.Reencrypt(t.Context(), 2)
	require.NoError(t, err)
	assert.Zero(t, n, "a second run has nothing to rewrite")

	_, err = clear.GetSubscription(t.Context(), subs[0].ID)
	require.ErrorIs(t, err, keyring.ErrNoKeys, "a sealed row read without keys says why it fails")
	_, err = clear.Reencrypt(t.Context(), 2)
	require.ErrorIs(t, err, keyring.ErrNoKeys)
}

func TestKeyRotation(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	old := postgres.New(pool, postgres.Encryption(testRing(t, 1)))
	sub := sealedSubscription(t)
	require.NoError(t, old.CreateSubscription(t.Context(), sub))
	empty := sealedSubscription(t)
	empty.Headers, empty.PreviousSecret, empty.PreviousSecretExpiresAt = map[string]string{}, domain.Secret{}, time.Time{}
	require.NoError(t, old.CreateSubscription(t.Context(), empty))

	rotated := postgres.New(pool, postgres.Encryption(testRing(t, 2, 1)))
	got, err := rotated.GetSubscription(t.Context(), sub.ID)
	require.NoError(t, err, "the old key, second in the ring, still opens")
	assert.Equal(t, sub.Headers, got.Headers)

	newOnly := postgres.New(pool, postgres.Encryption(testRing(t, 2)))
	_, err = newOnly.GetSubscription(t.Context(), sub.ID)
	require.ErrorIs(t, err, keyring.ErrUnknownKey, "before reencrypt, the old key is still needed")

	n, err := rotated.Reencrypt(t.Context(), postgres.ReencryptBatch)
	require.NoError(t, err)
	assert.Equal(t, 2, n)
	n, err = rotated.Reencrypt(t.Context(), postgres.ReencryptBatch)
	require.NoError(t, err)
	assert.Zero(t, n, "everything is under the first key")

	for _, want := range []domain.Subscription{sub, empty} {
		got, err = newOnly.GetSubscription(t.Context(), want.ID)
		require.NoError(t, err, "after reencrypt the old key can be removed")
		assert.True(t, got.Secret.Equal(want.Secret) && got.PreviousSecret.Equal(want.PreviousSecret))
		assert.Equal(t, want.Headers, got.Headers)
	}
	_, err = old.GetSubscription(t.Context(), sub.ID)
	require.ErrorIs(t, err, keyring.ErrUnknownKey)
}

func TestASealedValueMovedToAnotherRowDoesNotOpen(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	store := postgres.New(pool, postgres.Encryption(testRing(t, 1)))
	a, b := sealedSubscription(t), sealedSubscription(t)
	require.NoError(t, store.CreateSubscription(t.Context(), a))
	require.NoError(t, store.CreateSubscription(t.Context(), b))

	for _, column := range []string{"secret", "headers"} {
		// b gets a's value: someone with write access to the table tries
		// to make b sign with a's secret or send a's credentials.
		_, err := pool.Exec(t.Context(),
			"UPDATE subscriptions SET "+column+" = (SELECT "+column+" FROM subscriptions WHERE id = $1) WHERE id = $2", a.ID, b.ID)
		require.NoError(t, err)
		_, err = store.GetSubscription(t.Context(), b.ID)
		require.ErrorIs(t, err, keyring.ErrNotAuthentic, column)
		_, err = store.GetSubscription(t.Context(), a.ID)
		require.NoError(t, err)
	}
	// Within a row too: the previous secret's value in the secret column.
	_, err := pool.Exec(t.Context(), "UPDATE subscriptions SET secret = previous_secret WHERE id = $1", a.ID)
	require.NoError(t, err)
	_, err = store.GetSubscription(t.Context(), a.ID)
	require.ErrorIs(t, err, keyring.ErrNotAuthentic)
}
