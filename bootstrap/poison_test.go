package bootstrap_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dispatch-webhooks/dispatch/bootstrap"
	"github.com/dispatch-webhooks/dispatch/client"
	"github.com/dispatch-webhooks/dispatch/domain"
)

// orderedEndpoint records the data.tag of every webhook it accepts, in
// arrival order.
type orderedEndpoint struct {
	mu   sync.Mutex
	tags []string
}

func (o *orderedEndpoint) script(t *testing.T) func(int, *http.Request) (int, http.Header) {
	return func(_ int, r *http.Request) (int, http.Header) {
		var webhook struct {
			Data struct {
				Tag string `json:"tag"`
			} `json:"data"`
		}
		if err := json.NewDecoder(r.Body).Decode(&webhook); err != nil {
			t.Errorf("webhook body: %v", err)
		}
		o.mu.Lock()
		o.tags = append(o.tags, webhook.Data.Tag)
		o.mu.Unlock()
		return http.StatusOK, nil
	}
}

func (o *orderedEndpoint) got() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.tags...)
}

// publishOrdered publishes n events of eventType keyed by customer and
// tagged prefix:0 … prefix:n-1, and returns their ids.
func (c *cluster) publishOrdered(eventType, customer, prefix string, n int) []string {
	c.t.Helper()
	var ids []string
	for i := range n {
		ids = append(ids, c.publish(eventType, fmt.Sprintf(`{"customer":%q,"tag":"%s:%d"}`, customer, prefix, i)))
	}
	return ids
}

func tags(prefix string, n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("%s:%d", prefix, i))
	}
	return out
}

// TestPoisonEventIsRefusedWhileOrderedDeliveriesFlow: the poison
// event, a string with a NUL in data that an ordered subscription takes its
// key from, is refused at ingest with 422 naming its location, so it
// cannot stop anything; ordered deliveries of that subscription and of
// another go on.
func TestPoisonEventIsRefusedWhileOrderedDeliveriesFlow(t *testing.T) {
	t.Parallel()
	c := newCluster(t, nil)
	c.start(bootstrap.RoleWorker)
	c.start(bootstrap.RoleScheduler)
	rcv := newScripted(t)
	var byK, other orderedEndpoint
	_, urlK := rcv.add("/by-k", byK.script(t))
	_, urlOther := rcv.add("/other", other.script(t))
	c.subscribe(urlK, "t.a", client.SubscriptionInput{OrderingKey: new("/data/k")})
	c.subscribe(urlOther, "t.b", client.SubscriptionInput{OrderingKey: new("/data/customer")})

	for _, data := range []string{`{"k":"a\u0000b"}`, `{"k":"x","tag":"\ud800"}`} {
		res, err := c.api.PublishEventWithResponse(t.Context(), nil, client.PublishBody{Type: "t.a", Source: "test", Data: json.RawMessage(data)})
		expect(t, "publish "+data, res, err, http.StatusUnprocessableEntity)
		if !strings.Contains(string(res.Body), `"location":"body.data.`) {
			t.Errorf("publish %s: %s, want the location in data named", data, res.Body)
		}
	}
	idsK := make([]string, 0, 5)
	for i := range 5 {
		idsK = append(idsK, c.publish("t.a", fmt.Sprintf(`{"k":"a","tag":"k:%d"}`, i)))
	}
	idsOther := c.publishOrdered("t.b", "c1", "other", 5)
	for _, id := range append(idsK, idsOther...) {
		c.waitEvent(id, "delivered", 30*time.Second)
	}
	if got, want := byK.got(), tags("k", 5); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("ordered by data.k: got %v, want %v", got, want)
	}
	if got, want := other.got(), tags("other", 5); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("the other subscription: got %v, want %v", got, want)
	}
}

// TestUnfannableEventHoldsBackOnlyItsOwnLine: an event that passed no
// validation (written into PostgreSQL directly, as one accepted before
// ingest refused such strings) and cannot be fanned out: its ordering key
// cannot be stored. Its clean batch-mates are fanned out and delivered; it
// is settled as failed with a reason after its tries, never retried for
// ever; meanwhile another subscription's ordered deliveries, of another
// event type, flow; and the subscription it would have reached is held
// only until it is settled.
func TestUnfannableEventHoldsBackOnlyItsOwnLine(t *testing.T) {
	t.Parallel()
	c := newCluster(t, nil)
	rcv := newScripted(t)
	var byK, other orderedEndpoint
	_, urlK := rcv.add("/by-k", byK.script(t))
	_, urlOther := rcv.add("/other", other.script(t))
	c.subscribe(urlK, "t.a", client.SubscriptionInput{OrderingKey: new("/data/k")})
	c.subscribe(urlOther, "t.b", client.SubscriptionInput{OrderingKey: new("/data/customer")})

	// Three events in one outbox sweep, hence one fan-out batch: the bad
	// one between two clean ones.
	conn, err := pgx.Connect(t.Context(), c.cfg.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(t.Context())
	var direct []string
	for i, data := range []string{`{"k":"c1","tag":"k:0"}`, `{"k":"a\u0000b","tag":"bad"}`, `{"k":"c2","tag":"k:1"}`} {
		now := time.Now().UTC()
		id := domain.MustNewID(domain.EventIDPrefix, now)
		if _, err := conn.Exec(t.Context(),
			`INSERT INTO events (id, type, source, data, ordering_key, created_at) VALUES ($1, 't.a', 'test', $2, '', $3)`,
			id, []byte(data), now); err != nil {
			t.Fatalf("insert event %d: %v", i, err)
		}
		direct = append(direct, id)
	}
	bad := direct[1]
	c.start(bootstrap.RoleWorker)
	c.start(bootstrap.RoleScheduler)

	// Published after the bad event: the other subscription's are not
	// held behind it; the same type and pointer's are, until it is settled.
	idsOther := c.publishOrdered("t.b", "c1", "other", 5)
	idsK := make([]string, 0, 3)
	for i := range 3 {
		idsK = append(idsK, c.publish("t.a", fmt.Sprintf(`{"k":"c1","tag":"k:%d"}`, i+2)))
	}
	for _, id := range idsOther {
		c.waitEvent(id, "delivered", 30*time.Second)
	}
	if got, want := other.got(), tags("other", 5); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("the other subscription: got %v, want %v", got, want)
	}

	c.waitEvent(bad, "failed", 60*time.Second)
	ev := c.getEvent(bad)
	if ev.FailureReason == nil || *ev.FailureReason == "" || len(deref(ev.Deliveries)) != 0 {
		t.Errorf("the bad event = %+v, want failed with a failure_reason and no deliveries", ev)
	}
	for _, id := range append([]string{direct[0], direct[2]}, idsK...) {
		c.waitEvent(id, "delivered", 30*time.Second)
	}
	got := byK.got()
	var c1 []string
	for _, tag := range got {
		if tag != "k:1" { // c2's, on a line of its own
			c1 = append(c1, tag)
		}
	}
	if want := []string{"k:0", "k:2", "k:3", "k:4"}; fmt.Sprint(c1) != fmt.Sprint(want) || len(got) != 5 {
		t.Errorf("ordered by data.k: got %v, want c1's %v in order and c2's k:1", got, want)
	}
}

// TestParametersThatAreNotTextAreRefused: a filter or cursor holding a NUL
// or invalid UTF-8 names nothing Dispatch stores; PostgreSQL refuses it as
// a query parameter, which made it a 500. It is refused before any query,
// naming the parameter. (The server hands path parameters over still
// escaped: "evt_%00" is plain text, and not found.)
func TestParametersThatAreNotTextAreRefused(t *testing.T) {
	t.Parallel()
	c := newCluster(t, nil)
	base := c.api.ClientInterface.(*client.Client).Server
	for _, tc := range []struct {
		path     string
		status   int
		location string
	}{
		{"/v1/deliveries?event_id=evt_%00", http.StatusUnprocessableEntity, "query.event_id"},
		{"/v1/deliveries?subscription_id=%FF", http.StatusUnprocessableEntity, "query.subscription_id"},
		{"/v1/subscriptions?cursor=YzE6AA", http.StatusBadRequest, "query.cursor"}, // "c1:\x00"
	} {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, base+tc.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+testKey)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != tc.status || !strings.Contains(string(raw), `"location":"`+tc.location+`"`) {
			t.Errorf("GET %s = %d %s, want %d at %s", tc.path, res.StatusCode, raw, tc.status, tc.location)
		}
	}
}
