package bootstrap_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"go.uber.org/fx"

	"github.com/dispatch-webhooks/dispatch/adapters/postgres/pgtest"
	"github.com/dispatch-webhooks/dispatch/bootstrap"
	"github.com/dispatch-webhooks/dispatch/client"
)

// cluster is a deployment on real PostgreSQL and Redis, its roles started
// as separate fx apps in this process (or as processes, by the crash tests).
type cluster struct {
	t   *testing.T
	cfg bootstrap.Config
	api *client.ClientWithResponses
}

// newCluster migrates a fresh database and starts one api; workers and
// schedulers are started by the caller.
func newCluster(t *testing.T, tune func(*bootstrap.Config)) *cluster {
	t.Helper()
	return newClusterWith(t, tune)
}

// newClusterWith is newCluster with apiOptions added to the api's app, for
// replacing what it is built with (fx.Decorate).
func newClusterWith(t *testing.T, tune func(*bootstrap.Config), apiOptions ...fx.Option) *cluster {
	t.Helper()
	cfg := testConfig(t)
	cfg.DatabaseURL = pgtest.NewDatabase(t)
	testRedis(t, &cfg)
	cfg.VisibilityTimeout = time.Second
	if tune != nil {
		tune(&cfg)
	}
	startApp(t, bootstrap.RoleMigrate, cfg)
	var api *bootstrap.APIServer
	startApp(t, bootstrap.RoleAPI, cfg, fx.Options(apiOptions...), fx.Populate(&api))
	return &cluster{t: t, cfg: cfg, api: newAPIClient(t, "http://"+api.Addr())}
}

func (c *cluster) start(role bootstrap.Role, extra ...fx.Option) {
	c.t.Helper()
	startApp(c.t, role, c.cfg, extra...)
}

// newAPIClient is the generated client of the API at base, sending the
// test key.
func newAPIClient(t *testing.T, base string) *client.ClientWithResponses {
	t.Helper()
	api, err := client.NewClientWithResponses(base, client.WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
		req.Header.Set("Authorization", "Bearer "+testKey)
		return nil
	}))
	if err != nil {
		t.Fatalf("API client for %s: %v", base, err)
	}
	return api
}

// apiResponse is what every generated response has.
type apiResponse interface {
	StatusCode() int
	GetBody() []byte
}

// expect fails the test unless the call (what, for the message) got an
// answer with status want; it returns the answer.
func expect[R apiResponse](t testing.TB, what string, res R, err error, want int) R {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if got := res.StatusCode(); got != want {
		t.Fatalf("%s = %d, want %d: %s", what, got, want, res.GetBody())
	}
	return res
}

// body returns the decoded body of a successful answer, failing the test
// when the client decoded none: the OpenAPI document does not declare a
// JSON body for the status the API answered.
func body[T any](t testing.TB, what string, v *T) *T {
	t.Helper()
	if v == nil {
		t.Fatalf("%s: the answer's body was not decoded: the OpenAPI document declares no JSON body for its status", what)
	}
	return v
}

// subscribe creates a subscription for eventType at url and returns its id
// and secret. in sets the other fields.
func (c *cluster) subscribe(url, eventType string, in client.SubscriptionInput) (id, secret string) {
	c.t.Helper()
	in.Url, in.EventTypes = url, &[]string{eventType}
	const what = "create subscription"
	res, err := c.api.CreateSubscriptionWithResponse(c.t.Context(), in)
	sub := body(c.t, what, expect(c.t, what, res, err, http.StatusCreated).JSON201)
	return sub.Id, deref(sub.Secret)
}

// publish publishes one event and returns its id.
func (c *cluster) publish(eventType string, data string) string {
	c.t.Helper()
	return publishOn(c.t, c.api, eventType, data)
}

// publishOn publishes one event through api and returns its id.
func publishOn(t *testing.T, api *client.ClientWithResponses, eventType, data string) string {
	t.Helper()
	const what = "publish event"
	res, err := api.PublishEventWithResponse(t.Context(), nil, client.PublishBody{
		Type: eventType, Source: "test", Data: json.RawMessage(data),
	})
	return body(t, what, expect(t, what, res, err, http.StatusAccepted).JSON202).Id
}

// eventState is an event as waitEvent returns it.
type eventState struct {
	Status     client.EventStatus
	Deliveries []client.DeliverySummary
}

// getEvent reads event id.
func (c *cluster) getEvent(id string) *client.Event {
	c.t.Helper()
	what := "get event " + id
	limit := int64(500) // more than any test's event has deliveries
	res, err := c.api.GetEventWithResponse(c.t.Context(), id, &client.GetEventParams{Limit: &limit})
	return body(c.t, what, expect(c.t, what, res, err, http.StatusOK).JSON200)
}

// waitEvent polls the event until its status is want.
func (c *cluster) waitEvent(id, want string, timeout time.Duration) eventState {
	c.t.Helper()
	var ev eventState
	waitFor(c.t, timeout, fmt.Sprintf("event %s to be %s", id, want), func() bool {
		got := c.getEvent(id)
		ev = eventState{Status: got.Status, Deliveries: deref(got.Deliveries)}
		return string(ev.Status) == want
	})
	return ev
}

// attempts lists every attempt of the event's deliveries.
func (c *cluster) attempts(eventID string) []client.Attempt {
	c.t.Helper()
	what := "list attempts of event " + eventID
	var all []client.Attempt
	params := &client.ListEventAttemptsParams{}
	for {
		res, err := c.api.ListEventAttemptsWithResponse(c.t.Context(), eventID, params)
		page := body(c.t, what, expect(c.t, what, res, err, http.StatusOK).JSON200)
		all = append(all, deref(page.Data)...)
		if page.NextCursor == nil {
			return all
		}
		params.Cursor = page.NextCursor
	}
}

// deref is *p, or the zero value for nil: the client has pointers for
// optional fields and for nullable ones (huma declares every slice
// nullable).
func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// arrival is one request a scripted endpoint received.
type arrival struct {
	at        time.Time
	webhookID string
	body      string
	verifyErr error
	// status is what the endpoint answered; aborted is set when the
	// sender was gone before the answer (a killed worker).
	status  int
	aborted bool
}

// endpoint answers according to script, which sees how many requests came
// before this one, and records every arrival.
type endpoint struct {
	mu       sync.Mutex
	secret   string
	script   func(n int, r *http.Request) (status int, header http.Header)
	arrivals []arrival
}

// scripted serves many endpoints, one per path, on one local server.
type scripted struct {
	srv       *httptest.Server
	mu        sync.Mutex
	endpoints map[string]*endpoint
}

func newScripted(t *testing.T) *scripted {
	s := &scripted{endpoints: map[string]*endpoint{}}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

// add registers an endpoint at path and returns its URL.
func (s *scripted) add(path string, script func(n int, r *http.Request) (int, http.Header)) (*endpoint, string) {
	e := &endpoint{script: script}
	s.mu.Lock()
	s.endpoints[path] = e
	s.mu.Unlock()
	return e, s.srv.URL + path
}

func (s *scripted) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	e := s.endpoints[r.URL.Path]
	s.mu.Unlock()
	if e == nil {
		http.NotFound(w, r)
		return
	}
	body, _ := io.ReadAll(r.Body)
	e.mu.Lock()
	a := arrival{at: time.Now(), webhookID: r.Header.Get("Webhook-Id"), body: string(body)}
	if e.secret != "" {
		wh, err := standardwebhooks.NewWebhook(e.secret)
		if err == nil {
			err = wh.Verify(body, r.Header)
		}
		a.verifyErr = err
	}
	n := len(e.arrivals)
	e.arrivals = append(e.arrivals, a)
	script := e.script
	e.mu.Unlock()
	status, header := http.StatusOK, http.Header(nil)
	if script != nil {
		r.Body = io.NopCloser(bytes.NewReader(body)) // the script may read it again
		status, header = script(n, r)
	}
	e.mu.Lock()
	e.arrivals[n].status = status
	e.arrivals[n].aborted = r.Context().Err() != nil
	e.mu.Unlock()
	for k, vs := range header {
		w.Header()[k] = vs
	}
	w.WriteHeader(status)
	_, _ = io.WriteString(w, strings.Repeat("x", 10))
}

func (e *endpoint) setSecret(s string) { e.mu.Lock(); e.secret = s; e.mu.Unlock() }

func (e *endpoint) got() []arrival {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]arrival(nil), e.arrivals...)
}

// takesAMoment is an endpoint's script: 200 after d, so that work piles
// up behind a modest worker.
func takesAMoment(d time.Duration) func(int, *http.Request) (int, http.Header) {
	return func(int, *http.Request) (int, http.Header) {
		time.Sleep(d)
		return http.StatusOK, nil
	}
}

// sequence answers the given statuses in turn, then 200.
func sequence(statuses ...int) func(int, *http.Request) (int, http.Header) {
	return func(n int, _ *http.Request) (int, http.Header) {
		if n < len(statuses) {
			return statuses[n], nil
		}
		return http.StatusOK, nil
	}
}
