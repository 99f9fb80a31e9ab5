package bootstrap_test

import (
	"strings"
	"testing"

	"go.uber.org/fx"

	"github.com/dispatch-webhooks/dispatch/bootstrap"
)

// TestEveryRoleGraphIsComplete checks that every role's fx graph resolves,
// without connecting to anything.
func TestEveryRoleGraphIsComplete(t *testing.T) {
	t.Parallel()
	for _, role := range bootstrap.Roles {
		t.Run(string(role), func(t *testing.T) {
			t.Parallel()
			cfg := bootstrap.DefaultConfig()
			cfg.APIKeys = []string{strings.Repeat("k", bootstrap.MinAPIKeyLength)}
			if role == bootstrap.RoleReencrypt {
				cfg.EncryptionKeys = "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE="
			}
			opts, err := bootstrap.Options(role, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := fx.ValidateApp(opts); err != nil {
				t.Errorf("role %s: %v", role, err)
			}
		})
	}
}

func TestUnknownRoleIsRefused(t *testing.T) {
	t.Parallel()
	if _, err := bootstrap.Options("janitor", bootstrap.DefaultConfig()); err == nil {
		t.Error("Options accepted an unknown role")
	}
}

func TestAPIRolesNeedAKey(t *testing.T) {
	t.Parallel()
	if _, err := bootstrap.Options(bootstrap.RoleAPI, bootstrap.DefaultConfig()); err == nil {
		t.Error("the api role started without an API key")
	}
}

func TestReencryptNeedsKeys(t *testing.T) {
	t.Parallel()
	_, err := bootstrap.Options(bootstrap.RoleReencrypt, bootstrap.DefaultConfig())
	if err == nil || !strings.Contains(err.Error(), "DISPATCH_ENCRYPTION_KEYS") {
		t.Errorf("reencrypt without keys: %v, want an error naming DISPATCH_ENCRYPTION_KEYS", err)
	}
}
