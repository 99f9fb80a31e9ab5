package redis

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatch-webhooks/dispatch/adapters/redis/redistest"
)

// TestProtectionWarmLoadsItsScripts checks that Warm leaves its three
// scripts in the server's script cache, so that the first Admits and
// Finish are answered at once instead of with NOSCRIPT and a second round
// trip.
func TestProtectionWarmLoadsItsScripts(t *testing.T) {
	t.Parallel()
	_, client := redistest.Mini(t)
	ctx := t.Context()
	p := NewProtection(client, "warm:", ProtectionOptions{})
	hashes := []string{protectionAdmit.Hash(), protectionAdmitMany.Hash(), protectionFinish.Hash()}

	exists, err := client.ScriptExists(ctx, hashes...).Result()
	require.NoError(t, err)
	assert.Equal(t, []bool{false, false, false}, exists, "a new server has none of the scripts")

	require.NoError(t, p.Warm(ctx))
	exists, err = client.ScriptExists(ctx, hashes...).Result()
	require.NoError(t, err)
	assert.Equal(t, []bool{true, true, true}, exists, "every script is loaded")
}

// TestProtectionWarmReportsAnUnreachableServer drives the failure path.
func TestProtectionWarmReportsAnUnreachableServer(t *testing.T) {
	t.Parallel()
	mr, client := redistest.Mini(t)
	mr.Close()
	err := NewProtection(client, "warm:", ProtectionOptions{}).Warm(t.Context())
	assert.ErrorContains(t, err, "load script")
}
