package bootstrap_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"flag"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/fx"

	"github.com/dispatch-webhooks/dispatch/adapters/postgres/pgtest"
	"github.com/dispatch-webhooks/dispatch/adapters/redis/redistest"
	"github.com/dispatch-webhooks/dispatch/bootstrap"
	"github.com/dispatch-webhooks/dispatch/client"
)

// encryptionKey is a DISPATCH_ENCRYPTION_KEYS entry made of one repeated
// byte.
func encryptionKey(b byte) string {
	return base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{b}, 32))
}

// storedSubscriptions is every subscription row as PostgreSQL holds it.
func storedSubscriptions(t *testing.T, databaseURL string) string {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), databaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(t.Context())
	rows, err := conn.Query(t.Context(), "SELECT row_to_json(s)::text FROM subscriptions s")
	if err != nil {
		t.Fatal(err)
	}
	all, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(all, "\n")
}

// TestEncryptedSubscriptionsDeliverEndToEnd runs api and worker with
// DISPATCH_ENCRYPTION_KEYS: the rows hold neither the signing secret nor
// the Authorization header's value, reads show "***", and the webhook
// still carries the real header and a signature the Standard Webhooks
// library accepts. Then the keys rotate: `dispatch reencrypt` moves every
// row to the new key, and processes with only the new key deliver.
func TestEncryptedSubscriptionsDeliverEndToEnd(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.DatabaseURL = pgtest.NewDatabase(t)
	cfg.RedisURL = redistest.URL()
	cfg.RedisKeyPrefix = redistest.Prefix(t)
	cfg.EncryptionKeys = encryptionKey(1)

	startApp(t, bootstrap.RoleMigrate, cfg)
	var api *bootstrap.APIServer
	startApp(t, bootstrap.RoleAPI, cfg, fx.Populate(&api))
	startApp(t, bootstrap.RoleWorker, cfg)
	c := newAPIClient(t, "http://"+api.Addr())
	ctx := t.Context()

	ready, err := c.ReadyWithResponse(ctx)
	if got := body(t, "ready", expect(t, "ready", ready, err, http.StatusOK).JSON200); got.Warnings != nil {
		t.Errorf("ready with keys warns %v, want no warning", *got.Warnings)
	}

	rcv := newReceiver(t)
	const token = "Bearer secret-token-123"
	created, err := c.CreateSubscriptionWithResponse(ctx, client.SubscriptionInput{
		Url: rcv.srv.URL + "/hook", EventTypes: &[]string{"order.*"},
		Headers: &map[string]string{"Authorization": token},
	})
	sub := body(t, "create subscription", expect(t, "create subscription", created, err, http.StatusCreated).JSON201)
	secret := deref(sub.Secret)
	rcv.setSecret(secret)
	if sub.Headers["Authorization"] != "***" {
		t.Errorf("create answered headers %v, want the value shown as ***", sub.Headers)
	}

	rows := storedSubscriptions(t, cfg.DatabaseURL)
	for _, clear := range []string{secret, strings.TrimPrefix(secret, "whsec_"), "secret-token-123"} {
		if strings.Contains(rows, clear) {
			t.Errorf("the stored row holds %q in the clear:\n%s", clear, rows)
		}
	}
	got, err := c.GetSubscriptionWithResponse(ctx, sub.Id)
	if read := body(t, "get subscription", expect(t, "get subscription", got, err, http.StatusOK).JSON200); read.Headers["Authorization"] != "***" {
		t.Errorf("get answered headers %v, want ***", read.Headers)
	}

	publish := func(want int) {
		t.Helper()
		res, err := c.PublishEventWithResponse(ctx, nil, client.PublishBody{Type: "order.created", Source: "shop", Data: json.RawMessage(`{"n":1}`)})
		expect(t, "publish event", res, err, http.StatusAccepted)
		waitFor(t, 15*time.Second, "the receiver to get the webhook", func() bool { return rcv.count() >= want })
		r := rcv.last()
		if r.verifyErr != nil {
			t.Errorf("webhook %d: signature does not verify: %v", want, r.verifyErr)
		}
		if v := r.header.Get("Authorization"); v != token {
			t.Errorf("webhook %d: Authorization = %q, want the stored value", want, v)
		}
	}
	publish(1)

	// Rotation: a new key first, the old one still opening; reencrypt;
	// then a deployment with only the new key delivers.
	rotated := cfg
	rotated.EncryptionKeys = encryptionKey(2) + "," + encryptionKey(1)
	startApp(t, bootstrap.RoleReencrypt, rotated)
	newOnly := cfg
	newOnly.EncryptionKeys = encryptionKey(2)
	newOnly.RedisKeyPrefix = redistest.Prefix(t) + "new:"
	var api2 *bootstrap.APIServer
	startApp(t, bootstrap.RoleAPI, newOnly, fx.Populate(&api2))
	startApp(t, bootstrap.RoleWorker, newOnly)
	c = newAPIClient(t, "http://"+api2.Addr())
	publish(2)
	if rows := storedSubscriptions(t, cfg.DatabaseURL); strings.Contains(rows, "secret-token-123") {
		t.Errorf("the row holds the header in the clear after reencrypt:\n%s", rows)
	}
}

// TestReadyWarnsOfPlaintextSecrets: without DISPATCH_ENCRYPTION_KEYS the
// api stays ready but says that secrets are stored in plaintext.
func TestReadyWarnsOfPlaintextSecrets(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.DatabaseURL = pgtest.NewDatabase(t)
	cfg.RedisURL = redistest.URL()
	cfg.RedisKeyPrefix = redistest.Prefix(t)
	var api *bootstrap.APIServer
	startApp(t, bootstrap.RoleAPI, cfg, fx.Populate(&api))

	ready, err := newAPIClient(t, "http://"+api.Addr()).ReadyWithResponse(t.Context())
	got := body(t, "ready", expect(t, "ready", ready, err, http.StatusOK).JSON200)
	if got.Warnings == nil || len(*got.Warnings) != 1 || (*got.Warnings)[0] != bootstrap.PlaintextWarning {
		t.Errorf("ready without keys = %+v, want status ok with the plaintext warning", got)
	}
}

func (r *receiver) last() received { r.mu.Lock(); defer r.mu.Unlock(); return r.got[len(r.got)-1] }

// TestAdminReadyWarnsOfPlaintextSecrets: a worker's /ready (on
// DISPATCH_ADMIN_ADDR) says so too.
func TestAdminReadyWarnsOfPlaintextSecrets(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.DatabaseURL = pgtest.NewDatabase(t)
	cfg.RedisURL = redistest.URL()
	cfg.RedisKeyPrefix = redistest.Prefix(t)
	// A port that was free a moment ago: the admin server does not
	// report the one it got.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.AdminAddr = ln.Addr().String()
	ln.Close()
	startApp(t, bootstrap.RoleWorker, cfg)

	res, err := http.Get("http://" + cfg.AdminAddr + "/ready")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var got struct {
		Status   string   `json:"status"`
		Warnings []string `json:"warnings"`
	}
	if err := json.NewDecoder(res.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK || got.Status != "ok" || len(got.Warnings) != 1 || got.Warnings[0] != bootstrap.PlaintextWarning {
		t.Errorf("worker /ready without keys = %d %+v, want 200 ok with the plaintext warning", res.StatusCode, got)
	}
}

func TestEncryptionKeysConfig(t *testing.T) {
	key1 := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 32))
	key2 := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{2}, 32))
	testSetting(t, "DISPATCH_ENCRYPTION_KEYS", func(c bootstrap.Config) string { return c.EncryptionKeys }, []settingCase[string]{
		{"", nil, ""},
		{key1, nil, key1},
		{key1 + "," + key2, nil, key1 + "," + key2},
		{key1, []string{"--encryption-keys", key2}, key2},
	}, map[string]string{
		"secret":          "encryption-keys: encryption key 1 is not standard base64",
		key1 + ",":        "encryption-keys: encryption key 2 is empty",
		key1 + ",AAAA":    "encryption-keys: encryption key 2 must be 32 bytes, got 3",
		key1 + "," + key1: "encryption-keys: encryption key 2 repeats key 1",
		base64.StdEncoding.EncodeToString(make([]byte, 16)): "encryption key 1 must be 32 bytes, got 16",
	})

	// -h never shows the keys, not even as the default from the variable.
	t.Setenv("DISPATCH_ENCRYPTION_KEYS", key1)
	cfg := bootstrap.DefaultConfig()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	cfg.Flags(fs)
	var help strings.Builder
	fs.SetOutput(&help)
	fs.PrintDefaults()
	if !strings.Contains(help.String(), "encryption-keys") || strings.Contains(help.String(), key1) {
		t.Errorf("help text shows the key, or no encryption-keys flag:\n%s", help.String())
	}
}
