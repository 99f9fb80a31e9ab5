package bootstrap_test

import (
	"bytes"
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
	"github.com/dispatch-webhooks/dispatch/adapters/redis/redistest"
	"github.com/dispatch-webhooks/dispatch/bootstrap"
)

// cluster is a deployment on real PostgreSQL and Redis, its roles started
// as separate fx apps in this process (or as processes, by the crash tests).
type cluster struct {
	t      *testing.T
	cfg    bootstrap.Config
	client apiClient
}

// newCluster migrates a fresh database and starts one api; workers and
// schedulers are started by the caller.
func newCluster(t *testing.T, tune func(*bootstrap.Config)) *cluster {
	t.Helper()
	cfg := testConfig(t)
	cfg.DatabaseURL = pgtest.NewDatabase(t)
	cfg.RedisURL = redistest.URL()
	cfg.RedisKeyPrefix = redistest.Prefix(t)
	cfg.VisibilityTimeout = time.Second
	if tune != nil {
		tune(&cfg)
	}
	startApp(t, bootstrap.RoleMigrate, cfg)
	var api *bootstrap.APIServer
	startApp(t, bootstrap.RoleAPI, cfg, fx.Populate(&api))
	return &cluster{t: t, cfg: cfg, client: apiClient{base: "http://" + api.Addr(), t: t}}
}

func (c *cluster) start(role bootstrap.Role, extra ...fx.Option) {
	c.t.Helper()
	startApp(c.t, role, c.cfg, extra...)
}

// subscribe creates a subscription for eventType at url and returns its id
// and secret. fields add to or override the defaults.
func (c *cluster) subscribe(url, eventType string, fields map[string]any) (id, secret string) {
	c.t.Helper()
	body := map[string]any{"url": url, "event_types": []string{eventType}}
	for k, v := range fields {
		body[k] = v
	}
	var sub struct{ ID, Secret string }
	c.client.call(http.MethodPost, "/v1/subscriptions", body, http.StatusCreated, &sub)
	return sub.ID, sub.Secret
}

// publish publishes one event and returns its id.
func (c *cluster) publish(eventType string, data string) string {
	c.t.Helper()
	var ev struct{ ID string }
	c.client.call(http.MethodPost, "/v1/events", map[string]any{
		"type": eventType, "source": "test", "data": rawJSON(data),
	}, http.StatusAccepted, &ev)
	return ev.ID
}

type eventState struct {
	Status     string `json:"status"`
	Deliveries []struct {
		ID             string  `json:"id"`
		SubscriptionID string  `json:"subscription_id"`
		Status         string  `json:"status"`
		Attempts       int     `json:"attempts"`
		LastStatusCode *int    `json:"last_status_code"`
		LastError      *string `json:"last_error"`
	} `json:"deliveries"`
}

// waitEvent polls the event until its status is want.
func (c *cluster) waitEvent(id, want string, timeout time.Duration) eventState {
	c.t.Helper()
	var ev eventState
	waitFor(c.t, timeout, fmt.Sprintf("event %s to be %s", id, want), func() bool {
		c.client.call(http.MethodGet, "/v1/events/"+id, nil, http.StatusOK, &ev)
		return ev.Status == want
	})
	return ev
}

type attemptRecord struct {
	DeliveryID string `json:"delivery_id"`
	Attempt    int    `json:"attempt"`
	StatusCode *int   `json:"status_code"`
	Error      string `json:"error"`
}

func (c *cluster) attempts(eventID string) []attemptRecord {
	c.t.Helper()
	var out struct{ Data []attemptRecord }
	c.client.call(http.MethodGet, "/v1/events/"+eventID+"/attempts", nil, http.StatusOK, &out)
	return out.Data
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

// sequence answers the given statuses in turn, then 200.
func sequence(statuses ...int) func(int, *http.Request) (int, http.Header) {
	return func(n int, _ *http.Request) (int, http.Header) {
		if n < len(statuses) {
			return statuses[n], nil
		}
		return http.StatusOK, nil
	}
}

type rawJSON string

func (r rawJSON) MarshalJSON() ([]byte, error) { return []byte(r), nil }
