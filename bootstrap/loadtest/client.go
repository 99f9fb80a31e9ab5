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
	"time"

	"github.com/dispatch-webhooks/dispatch/client"
)

// clientAPI is dispatchAPI on the generated client, with a connection pool
// large enough for every publisher to keep its keep-alive connection
// (net/http keeps only 2 idle connections per host by default, which would
// make most publishes dial anew).
type clientAPI struct {
	api       *client.ClientWithResponses
	transport *http.Transport
}

func newClientAPI(baseURL, apiKey string, publishers int) (*clientAPI, error) {
	transport := &http.Transport{
		Proxy:               nil, // the target is on this machine
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        publishers + 16,
		MaxIdleConnsPerHost: publishers + 16,
		IdleConnTimeout:     90 * time.Second,
	}
	httpClient := &http.Client{Transport: transport, Timeout: 30 * time.Second}
	api, err := client.NewClientWithResponses(baseURL,
		client.WithHTTPClient(httpClient),
		client.WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
			req.Header.Set("Authorization", "Bearer "+apiKey)
			return nil
		}))
	if err != nil {
		return nil, fmt.Errorf("API client for %s: %w", baseURL, err)
	}
	return &clientAPI{api: api, transport: transport}, nil
}

func (c *clientAPI) CreateSubscription(ctx context.Context, url string, maxInFlight, rateLimit int) (string, string, error) {
	inFlight, limit := int64(maxInFlight), int64(rateLimit)
	description := "dispatch-load"
	res, err := c.api.CreateSubscriptionWithResponse(ctx, client.SubscriptionInput{
		Url: url, EventTypes: &LoadEventTypes, Description: &description,
		MaxInFlight: &inFlight, RateLimit: &limit,
	})
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
	res, err := c.api.ClientInterface.PublishEventWithBody(ctx, nil, "application/json", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	answer, err := io.ReadAll(res.Body)
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

// eventID reads the "id" member of the JSON object answer. It decodes only
// as far as that member (which comes before the echoed data), so the
// generator spends less of the machine it measures on each answer.
func eventID(answer []byte) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(answer))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return "", fmt.Errorf("not a JSON object: %v", err)
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return "", err
		}
		if key == "id" {
			var id string
			err := dec.Decode(&id)
			return id, err
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return "", err
		}
	}
	return "", errors.New(`no "id" member`)
}

func (c *clientAPI) Close() { c.transport.CloseIdleConnections() }
