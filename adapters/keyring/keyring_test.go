package keyring_test

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatch-webhooks/dispatch/adapters/keyring"
)

func testKey(b byte) []byte { return bytes.Repeat([]byte{b}, keyring.KeySize) }

func encoded(b byte) string { return base64.StdEncoding.EncodeToString(testKey(b)) }

func TestParse(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, list string
		keys       int
		err        string
	}{
		{name: "empty is no keys", list: "", keys: 0},
		{name: "blank is no keys", list: "  ", keys: 0},
		{name: "one key", list: encoded(1), keys: 1},
		{name: "two keys", list: encoded(1) + "," + encoded(2), keys: 2},
		{name: "spaces around keys", list: " " + encoded(1) + " , " + encoded(2) + " ", keys: 2},
		{name: "empty entry", list: encoded(1) + ",", err: "encryption key 2 is empty"},
		{name: "empty first entry", list: "," + encoded(1), err: "encryption key 1 is empty"},
		{name: "not base64", list: "not-base64!", err: "encryption key 1 is not standard base64"},
		{name: "url base64", list: base64.URLEncoding.EncodeToString(bytes.Repeat([]byte{0xfb}, 32)), err: "encryption key 1 is not standard base64"},
		{name: "short key", list: base64.StdEncoding.EncodeToString(make([]byte, 16)), err: "encryption key 1 must be 32 bytes, got 16"},
		{name: "long key", list: encoded(1) + "," + base64.StdEncoding.EncodeToString(make([]byte, 33)), err: "encryption key 2 must be 32 bytes, got 33"},
		{name: "repeated key", list: encoded(1) + "," + encoded(2) + "," + encoded(1), err: "encryption key 3 repeats key 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ring, err := keyring.Parse(tc.list)
			if tc.err != "" {
				require.EqualError(t, err, tc.err)
				for _, field := range strings.Split(tc.list, ",") {
					if strings.TrimSpace(field) != "" {
						assert.NotContains(t, err.Error(), strings.TrimSpace(field), "an error never quotes a key")
					}
				}
				return
			}
			require.NoError(t, err)
			assert.Len(t, ring.KeyIDs(), tc.keys)
			assert.Equal(t, tc.keys > 0, ring.Enabled())
		})
	}
}

func TestSealOpensUnderItsContextOnly(t *testing.T) {
	t.Parallel()
	ring, err := keyring.New(testKey(1))
	require.NoError(t, err)
	sealed, err := ring.Seal([]byte("whsec_secret"), "sub_1/secret")
	require.NoError(t, err)
	assert.True(t, keyring.IsSealed(sealed))
	assert.NotContains(t, sealed, "whsec_secret")
	again, err := ring.Seal([]byte("whsec_secret"), "sub_1/secret")
	require.NoError(t, err)
	assert.NotEqual(t, sealed, again, "each seal has its own nonce")

	plain, err := ring.Open(sealed, "sub_1/secret")
	require.NoError(t, err)
	assert.Equal(t, "whsec_secret", string(plain))

	_, err = ring.Open(sealed, "sub_2/secret")
	require.ErrorIs(t, err, keyring.ErrNotAuthentic, "a value moved to another row does not open")
	_, err = ring.Open(sealed, "sub_1/previous_secret")
	require.ErrorIs(t, err, keyring.ErrNotAuthentic, "a value moved to another column does not open")

	body, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(sealed, keyring.Prefix))
	require.NoError(t, err)
	body[len(body)-1] ^= 1
	_, err = ring.Open(keyring.Prefix+base64.StdEncoding.EncodeToString(body), "sub_1/secret")
	require.ErrorIs(t, err, keyring.ErrNotAuthentic, "an altered value does not open")
}

func TestRotation(t *testing.T) {
	t.Parallel()
	old, err := keyring.New(testKey(1))
	require.NoError(t, err)
	sealedOld, err := old.Seal([]byte("value"), "ctx")
	require.NoError(t, err)

	rotated, err := keyring.New(testKey(2), testKey(1))
	require.NoError(t, err)
	plain, err := rotated.Open(sealedOld, "ctx")
	require.NoError(t, err, "a key second in the ring still opens")
	assert.Equal(t, "value", string(plain))
	assert.False(t, rotated.SealedByFirst(sealedOld))
	assert.True(t, old.SealedByFirst(sealedOld))

	sealedNew, err := rotated.Seal(plain, "ctx")
	require.NoError(t, err)
	assert.True(t, rotated.SealedByFirst(sealedNew), "the first key seals")

	newOnly, err := keyring.New(testKey(2))
	require.NoError(t, err)
	_, err = newOnly.Open(sealedNew, "ctx")
	require.NoError(t, err, "once rewritten, the old key can go")
	_, err = newOnly.Open(sealedOld, "ctx")
	require.ErrorIs(t, err, keyring.ErrUnknownKey)
	assert.Contains(t, err.Error(), old.KeyIDs()[0], "the error names the missing key's id")

	var none keyring.Ring
	_, err = none.Open(sealedNew, "ctx")
	require.ErrorIs(t, err, keyring.ErrNoKeys)
	_, err = none.Seal([]byte("x"), "ctx")
	require.ErrorIs(t, err, keyring.ErrNoKeys)
	assert.False(t, none.SealedByFirst(sealedNew))
}

func TestOpenRefusesMalformedValues(t *testing.T) {
	t.Parallel()
	ring, err := keyring.New(testKey(1))
	require.NoError(t, err)
	for _, stored := range []string{
		"", "whsec_abc", "enc:v2:AAAA", keyring.Prefix, keyring.Prefix + "!!!!", keyring.Prefix + "AAA=",
		keyring.Prefix + base64.StdEncoding.EncodeToString([]byte{1, 2}),
	} {
		_, err := ring.Open(stored, "ctx")
		assert.Error(t, err, "%q", stored)
	}
	// A body that names the key but is shorter than a nonce and a tag.
	sealed, err := ring.Seal(nil, "ctx")
	require.NoError(t, err)
	body, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(sealed, keyring.Prefix))
	_, err = ring.Open(keyring.Prefix+base64.StdEncoding.EncodeToString(body[:10]), "ctx")
	require.ErrorIs(t, err, keyring.ErrMalformed)
}

// FuzzOpen: Open reads what is stored in PostgreSQL, which anyone with
// write access to the database controls; it must fail cleanly, never
// panic, and open only what the ring sealed for that context.
func FuzzOpen(f *testing.F) {
	ring, err := keyring.New(testKey(1), testKey(2))
	if err != nil {
		f.Fatal(err)
	}
	sealed, err := ring.Seal([]byte("whsec_x"), "ctx")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(sealed, "ctx")
	f.Add(keyring.Prefix, "")
	f.Add(keyring.Prefix+"AAAAAA==", "ctx")
	f.Add("whsec_abc", "ctx")
	f.Fuzz(func(t *testing.T, stored, context string) {
		ring.SealedByFirst(stored)
		plain, err := ring.Open(stored, context)
		if err != nil {
			return
		}
		if string(plain) != "whsec_x" || context != "ctx" {
			// Only what the ring sealed opens, for its context: the
			// fuzzer cannot forge a value. (Each fuzzing process seals
			// its own seed, so the check is on what opens, not on the
			// sealed text.)
			t.Fatalf("Open(%q, %q) = %q, want an error", stored, context, plain)
		}
	})
}
