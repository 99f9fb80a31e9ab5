package redis

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatch-webhooks/dispatch/adapters/redis/redistest"
)

// TestProtectionWarmLoadsItsScripts checks that Warm leaves both scripts in
// the server's script cache, so that the first Admit and Finish are
// answered at once instead of with NOSCRIPT and a second round trip.
func TestProtectionWarmLoadsItsScripts(t *testing.T) {
	t.Parallel()
	_, client := redistest.Mini(t)
	ctx := t.Context()
	p := NewProtection(client, "warm:", ProtectionOptions{})
	hashes := []string{protectionAdmit.Hash(), protectionFinish.Hash()}

	exists, err := client.ScriptExists(ctx, hashes...).Result()
	require.NoError(t, err)
	assert.Equal(t, []bool{false, false}, exists, "a new server has neither script")

	require.NoError(t, p.Warm(ctx))
	exists, err = client.ScriptExists(ctx, hashes...).Result()
	require.NoError(t, err)
	assert.Equal(t, []bool{true, true}, exists, "both scripts are loaded")
}

// TestProtectionWarmReportsAnUnreachableServer drives the failure path.
func TestProtectionWarmReportsAnUnreachableServer(t *testing.T) {
	t.Parallel()
	mr, client := redistest.Mini(t)
	mr.Close()
	err := NewProtection(client, "warm:", ProtectionOptions{}).Warm(t.Context())
	assert.ErrorContains(t, err, "load script")
}
