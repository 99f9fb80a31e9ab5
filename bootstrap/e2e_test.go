package bootstrap_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"go.uber.org/fx"

	"github.com/dispatch-webhooks/dispatch/adapters/postgres/pgtest"
	"github.com/dispatch-webhooks/dispatch/bootstrap"
	"github.com/dispatch-webhooks/dispatch/client"
)

const testKey = "test-key-0123456789abcdefghijklmnop"

// TestDeliversOneEventEndToEnd runs api, worker and scheduler as separate fx
// apps on real PostgreSQL and Redis, and follows one event from publish to a
// verified webhook at a local receiver.
func TestDeliversOneEventEndToEnd(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.DatabaseURL = pgtest.NewDatabase(t)
	testRedis(t, &cfg)

	startApp(t, bootstrap.RoleMigrate, cfg)
	var api *bootstrap.APIServer
	startApp(t, bootstrap.RoleAPI, cfg, fx.Populate(&api))
	startApp(t, bootstrap.RoleWorker, cfg)
	startApp(t, bootstrap.RoleScheduler, cfg)

	deliverOneEvent(t, "http://"+api.Addr())
}

// TestDevDeliversOneEventEndToEnd is the same scenario on `dispatch dev`:
// embedded Redis, in-memory store.
func TestDevDeliversOneEventEndToEnd(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	var api *bootstrap.APIServer
	startApp(t, bootstrap.RoleDev, cfg, fx.Populate(&api))

	deliverOneEvent(t, "http://"+api.Addr())
}

func testConfig(t *testing.T) bootstrap.Config {
	cfg := bootstrap.DefaultConfig()
	cfg.ListenAddr = "127.0.0.1:0"
	cfg.APIKeys = []string{testKey}
	cfg.AllowPrivateTargets = true
	cfg.SchedulerPollInterval = 50 * time.Millisecond
	cfg.LogLevel = "error"
	testQueue(t, &cfg)
	return cfg
}

// startApp starts role as an fx app and stops it when the test ends.
func startApp(t *testing.T, role bootstrap.Role, cfg bootstrap.Config, extra ...fx.Option) {
	t.Helper()
	opts, err := bootstrap.Options(role, cfg)
	if err != nil {
		t.Fatalf("options of %s: %v", role, err)
	}
	app := fx.New(opts, fx.Options(extra...))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := app.Start(ctx); err != nil {
		t.Fatalf("start %s: %v", role, err)
	}
	if role == bootstrap.RoleMigrate {
		stopApp(t, app, role)
		return
	}
	t.Cleanup(func() { stopApp(t, app, role) })
}

func stopApp(t *testing.T, app *fx.App, role bootstrap.Role) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := app.Stop(ctx); err != nil {
		t.Errorf("stop %s: %v", role, err)
	}
}

// deliverOneEvent subscribes a local receiver, publishes one event, and
// checks the webhook (body, headers, signature) and what the API reports.
func deliverOneEvent(t *testing.T, base string) {
	rcv := newReceiver(t)
	api := newAPIClient(t, base)
	ctx := t.Context()

	created, err := api.CreateSubscriptionWithResponse(ctx, client.SubscriptionInput{
		Url: rcv.srv.URL + "/hook", EventTypes: &[]string{"order.*"},
		Headers: &map[string]string{"X-Tenant": "acme"},
	})
	sub := body(t, "create subscription", expect(t, "create subscription", created, err, http.StatusCreated).JSON201)
	rcv.setSecret(deref(sub.Secret))

	res, err := api.PublishEventWithResponse(ctx, nil, client.PublishBody{
		Type: "order.created", Source: "shop", Data: json.RawMessage(`{"order_id": "ord_1", "amount": 4200}`), // delivered compact, keys in the producer's order
	})
	published := body(t, "publish event", expect(t, "publish event", res, err, http.StatusAccepted).JSON202)
	if published.Status != "pending" {
		t.Errorf("published status = %q, want pending", published.Status)
	}

	waitFor(t, 15*time.Second, "the receiver to get the webhook", func() bool { return rcv.count() >= 1 })
	got := rcv.first()
	if got.verifyErr != nil {
		t.Errorf("signature does not verify with the Standard Webhooks library: %v", got.verifyErr)
	}
	if got.path != "/hook" || got.method != http.MethodPost {
		t.Errorf("request = %s %s, want POST /hook", got.method, got.path)
	}
	for name, want := range map[string]string{
		"Content-Type": "application/json", "Webhook-Id": published.Id, "X-Tenant": "acme",
	} {
		if v := got.header.Get(name); v != want {
			t.Errorf("header %s = %q, want %q", name, v, want)
		}
	}
	if ua := got.header.Get("User-Agent"); ua != "Dispatch/"+bootstrap.Version {
		t.Errorf("User-Agent = %q, want Dispatch/%s", ua, bootstrap.Version)
	}
	ts, err := strconv.ParseInt(got.header.Get("Webhook-Timestamp"), 10, 64)
	if err != nil || time.Since(time.Unix(ts, 0)).Abs() > time.Minute {
		t.Errorf("webhook-timestamp = %q, want unix seconds of now", got.header.Get("Webhook-Timestamp"))
	}
	var webhook map[string]json.RawMessage
	if err := json.Unmarshal(got.body, &webhook); err != nil {
		t.Fatalf("body is not a JSON object: %v\n%s", err, got.body)
	}
	if len(webhook) != 5 {
		t.Errorf("body has keys %v, want exactly id, type, source, timestamp, data", keys(webhook))
	}
	wantFields := map[string]string{
		"id": `"` + published.Id + `"`, "type": `"order.created"`, "source": `"shop"`,
		"data": `{"order_id":"ord_1","amount":4200}`,
	}
	for k, want := range wantFields {
		if string(webhook[k]) != want {
			t.Errorf("body %s = %s, want %s", k, webhook[k], want)
		}
	}
	var stamp string
	_ = json.Unmarshal(webhook["timestamp"], &stamp)
	if at, err := time.Parse(time.RFC3339Nano, stamp); err != nil || !at.Equal(published.CreatedAt) {
		t.Errorf("body timestamp = %s, want the event's created_at %s in RFC 3339", webhook["timestamp"], published.CreatedAt.Format(time.RFC3339Nano))
	}

	var event *client.Event
	waitFor(t, 10*time.Second, "the event to be reported delivered", func() bool {
		res, err := api.GetEventWithResponse(ctx, published.Id, nil)
		event = body(t, "get event", expect(t, "get event", res, err, http.StatusOK).JSON200)
		return event.Status == "delivered"
	})
	deliveries := deref(event.Deliveries)
	if len(deliveries) != 1 {
		t.Fatalf("event has %d deliveries, want 1", len(deliveries))
	}
	d := deliveries[0]
	if d.SubscriptionId != sub.Id || d.Status != "delivered" || d.Attempts != 1 || d.LastStatusCode == nil || *d.LastStatusCode != 200 {
		t.Errorf("delivery = %+v, want delivered to %s in 1 attempt with 200", d, sub.Id)
	}

	listed, err := api.ListEventAttemptsWithResponse(ctx, published.Id, nil)
	attempts := deref(body(t, "list attempts", expect(t, "list attempts", listed, err, http.StatusOK).JSON200).Data)
	if len(attempts) != 1 || attempts[0].Attempt != 1 || attempts[0].StatusCode == nil || *attempts[0].StatusCode != 200 {
		t.Errorf("attempts = %+v, want one attempt answered 200", attempts)
	}

	// Nothing may arrive twice: give the scheduler several scans to make a
	// mistake, then count again.
	time.Sleep(300 * time.Millisecond)
	if n := rcv.count(); n != 1 {
		t.Errorf("receiver got %d requests, want exactly 1", n)
	}
}

type received struct {
	method, path string
	header       http.Header
	body         []byte
	verifyErr    error
}

// receiver is a local webhook endpoint that verifies every request with the
// Standard Webhooks reference library.
type receiver struct {
	srv    *httptest.Server
	mu     sync.Mutex
	secret string
	got    []received
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		defer r.mu.Unlock()
		rec := received{method: req.Method, path: req.URL.Path, header: req.Header.Clone(), body: body}
		wh, err := standardwebhooks.NewWebhook(r.secret)
		if err == nil {
			err = wh.Verify(body, req.Header)
		}
		rec.verifyErr = err
		r.got = append(r.got, rec)
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) setSecret(s string) { r.mu.Lock(); r.secret = s; r.mu.Unlock() }
func (r *receiver) count() int         { r.mu.Lock(); defer r.mu.Unlock(); return len(r.got) }
func (r *receiver) first() received    { r.mu.Lock(); defer r.mu.Unlock(); return r.got[0] }

// waitFor polls cond until it holds or timeout passes, then fails saying
// what it waited for.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func keys(m map[string]json.RawMessage) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
