package client_test

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"

	"github.com/dispatch-webhooks/dispatch/bootstrap"
)

// TestCommittedDocumentsAreWhatTheAPIServes runs `dispatch openapi` for
// both versions and compares with the committed documents the client is
// generated from. (`go tool task verify` checks the client itself.)
func TestCommittedDocumentsAreWhatTheAPIServes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ version, file, openapi string }{
		{"3.1", "openapi.json", "3.1.0"},
		{"3.0", "openapi-3.0.json", "3.0.3"},
	} {
		var stdout, stderr bytes.Buffer
		if code := bootstrap.Main([]string{"openapi", "--version", tc.version}, &stdout, &stderr); code != 0 {
			t.Fatalf("dispatch openapi --version %s exited %d: %s", tc.version, code, stderr.String())
		}
		var doc struct {
			OpenAPI string `json:"openapi"`
		}
		if err := json.Unmarshal(stdout.Bytes(), &doc); err != nil || doc.OpenAPI != tc.openapi {
			t.Errorf("dispatch openapi --version %s printed openapi %q (err %v), want %s", tc.version, doc.OpenAPI, err, tc.openapi)
		}
		committed, err := os.ReadFile(tc.file)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(committed, stdout.Bytes()) {
			t.Errorf("client/%s is not what the API serves: run `go tool task generate` and commit client/", tc.file)
		}
	}
}

func TestOpenAPICommandRefusesAnUnknownVersion(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	if code := bootstrap.Main([]string{"openapi", "--version", "2.0"}, &stdout, &stderr); code != 2 || stdout.Len() != 0 {
		t.Errorf("dispatch openapi --version 2.0 exited %d printing %d bytes, want 2 and nothing", code, stdout.Len())
	}
}
