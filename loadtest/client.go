package loadtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/dispatch-webhooks/dispatch/client"
)

// clientAPI is dispatchAPI on the generated client. Against a plain-HTTP
// target its requests go through a keepAliveDoer; otherwise through
// net/http with a connection pool large enough for every publisher to keep
// its keep-alive connection (net/http keeps only 2 idle connections per
// host by default, which would make most publishes dial anew).
type clientAPI struct {
	api   *client.ClientWithResponses
	close func()
}

// requestTimeout bounds each request to the API.
const requestTimeout = 30 * time.Second

func newClientAPI(baseURL, apiKey string, publishers int) (*clientAPI, error) {
	target, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("API address %q: %w", baseURL, err)
	}
	var doer client.HttpRequestDoer
	var closeIdle func()
	if target.Scheme == "http" && target.Host != "" {
		d := newKeepAliveDoer(hostPort(target), requestTimeout)
		doer, closeIdle = d, d.Close
	} else {
		transport := &http.Transport{
			Proxy:               nil, // the target is on this machine
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        publishers + 16,
			MaxIdleConnsPerHost: publishers + 16,
			IdleConnTimeout:     90 * time.Second,
		}
		doer, closeIdle = &http.Client{Transport: transport, Timeout: requestTimeout}, transport.CloseIdleConnections
	}
	api, err := client.NewClientWithResponses(baseURL,
		client.WithHTTPClient(doer),
		client.WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
			req.Header.Set("Authorization", "Bearer "+apiKey)
			return nil
		}))
	if err != nil {
		return nil, fmt.Errorf("API client for %s: %w", baseURL, err)
	}
	return &clientAPI{api: api, close: closeIdle}, nil
}

// hostPort is u's host with its port, 80 when u names none.
func hostPort(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	return net.JoinHostPort(u.Hostname(), "80")
}

// Connect sends n /health requests at once, each on a connection of its
// own unless an earlier one is already back in the pool, where the
// connections then stay for the publishers.
func (c *clientAPI) Connect(ctx context.Context, n int) error {
	errs := make(chan error, n)
	for range n {
		go func() {
			res, err := c.api.HealthWithResponse(ctx)
			if err == nil && res.StatusCode() != http.StatusOK {
				err = fmt.Errorf("/health answered %s", res.Status())
			}
			errs <- err
		}()
	}
	var all []error
	for range n {
		all = append(all, <-errs)
	}
	return errors.Join(all...)
}

func (c *clientAPI) CreateSubscription(ctx context.Context, s subscriptionSpec) (string, string, error) {
	inFlight, limit := int64(s.MaxInFlight), int64(s.RateLimit)
	description := "dispatch-load"
	in := client.SubscriptionInput{
		Url: s.URL, EventTypes: &s.EventTypes, Description: &description,
		MaxInFlight: &inFlight, RateLimit: &limit,
	}
	if s.Timeout > 0 {
		timeout := s.Timeout.String()
		in.Timeout = &timeout
	}
	res, err := c.api.CreateSubscriptionWithResponse(ctx, in)
	if err != nil {
		return "", "", err
	}
	if res.JSON201 == nil || res.JSON201.Secret == nil {
		return "", "", fmt.Errorf("%s: %s", res.Status(), bytes.TrimSpace(res.Body))
	}
	return res.JSON201.Id, *res.JSON201.Secret, nil
}

func (c *clientAPI) DeleteSubscription(ctx context.Context, id string) error {
	res, err := c.api.DeleteSubscriptionWithResponse(ctx, id)
	if err != nil {
		return err
	}
	if res.StatusCode() != http.StatusNoContent && res.StatusCode() != http.StatusNotFound {
		return fmt.Errorf("delete subscription %s: %s: %s", id, res.Status(), bytes.TrimSpace(res.Body))
	}
	return nil
}

// Publish sends body as it is (the publishers build it once per event,
// cheaper than marshalling a client.PublishBody) through the generated
// client, and decodes only the id from the answer: the generator shares
// the machine with what it measures, and decoding the echoed data into
// maps cost it as much CPU as building the request.
func (c *clientAPI) Publish(ctx context.Context, body []byte) (string, error) {
	res, err := c.api.PublishEventWithBody(ctx, nil, "application/json", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	answer, err := readAnswer(res)
	if err != nil {
		return "", fmt.Errorf("read publish answer: %w", err)
	}
	if res.StatusCode != http.StatusAccepted {
		return "", fmt.Errorf("publish answered %s: %s", res.Status, bytes.TrimSpace(answer))
	}
	id, err := eventID(answer)
	if err != nil || id == "" {
		return "", fmt.Errorf("publish answered %s without an event id: %v", res.Status, err)
	}
	return id, nil
}

// readAnswer returns res's body. The keepAliveDoer has read it whole
// already (answerBody), and its bytes are taken as they are: copying them
// again (io.ReadAll grows a buffer from 512 bytes) was ~3 KB of garbage a
// publish, which the generator's garbage collection takes from the machine
// it measures. net/http's bodies (an https target) are read.
func readAnswer(res *http.Response) ([]byte, error) {
	if whole, ok := res.Body.(interface{ Bytes() []byte }); ok {
		return whole.Bytes(), nil
	}
	return io.ReadAll(res.Body)
}

// eventID reads the "id" member of the JSON object answer. Dispatch's
// answer starts {"$schema":"…","id":"…", which it reads by hand, sparing
// the generator the decoding of the whole answer (~17 µs here, taken from
// the machine it measures); any other answer is decoded.
func eventID(answer []byte) (string, error) {
	if id, ok := leadingID(answer); ok {
		return id, nil
	}
	var accepted struct {
		ID *string `json:"id"`
	}
	if err := json.Unmarshal(answer, &accepted); err != nil {
		return "", err
	}
	if accepted.ID == nil {
		return "", errors.New(`no "id" member`)
	}
	return *accepted.ID, nil
}

func (c *clientAPI) Close() { c.close() }

// leadingID returns the id of an answer that starts {"id":"…" or
// {"$schema":"…","id":"…", with no escapes in those strings; ok is false
// for anything else.
func leadingID(answer []byte) (id string, ok bool) {
	rest, ok := bytes.CutPrefix(answer, []byte(`{`))
	if !ok {
		return "", false
	}
	if after, isSchema := bytes.CutPrefix(rest, []byte(`"$schema":"`)); isSchema {
		end := bytes.IndexAny(after, `"\`)
		if end < 0 || after[end] != '"' {
			return "", false
		}
		if rest, ok = bytes.CutPrefix(after[end+1:], []byte(`,`)); !ok {
			return "", false
		}
	}
	value, ok := bytes.CutPrefix(rest, []byte(`"id":"`))
	if !ok {
		return "", false
	}
	end := bytes.IndexAny(value, `"\`)
	if end <= 0 || value[end] != '"' {
		return "", false
	}
	return string(value[:end]), true
}
