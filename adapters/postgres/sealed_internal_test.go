package postgres

import (
	"bytes"
	"testing"

	"github.com/dispatch-webhooks/dispatch/adapters/keyring"
)

// FuzzOpenSealedColumns: the secret and headers columns are read from
// PostgreSQL, where anyone with write access to the table controls them.
// Reading them must fail with an error or succeed, never panic; and what
// opens from a sealed value is only what was sealed for that row.
func FuzzOpenSealedColumns(f *testing.F) {
	ring, err := keyring.New(bytes.Repeat([]byte{7}, keyring.KeySize))
	if err != nil {
		f.Fatal(err)
	}
	headers, err := sealHeaders(ring, "sub_1", map[string]string{"Authorization": "Bearer t"})
	if err != nil {
		f.Fatal(err)
	}
	secret, err := sealText(ring, "sub_1", columnSecret, "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		f.Fatal(err)
	}
	f.Add("sub_1", secret, headers)
	f.Add("sub_1", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", []byte(`{"X-A":"b"}`))
	f.Add("sub_2", "", []byte(`"enc:v1:AAAA"`))
	f.Add("sub_1", keyring.Prefix, []byte(`null`))
	f.Fuzz(func(t *testing.T, id, storedSecret string, storedHeaders []byte) {
		if s, err := openSecret(ring, id, columnSecret, storedSecret); err == nil && keyring.IsSealed(storedSecret) {
			if id != "sub_1" || s.Reveal() != "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" {
				t.Fatalf("opened %q for %s from %q", s.Reveal(), id, storedSecret)
			}
		}
		if h, err := openHeaders(ring, id, storedHeaders); err == nil {
			if h == nil {
				t.Fatal("nil headers without an error")
			}
			if len(storedHeaders) > 0 && storedHeaders[0] == '"' && (id != "sub_1" || h["Authorization"] != "Bearer t") {
				t.Fatalf("opened %v for %s from %s", h, id, storedHeaders)
			}
		}
	})
}
