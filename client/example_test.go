package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"

	"github.com/dispatch-webhooks/dispatch/client"
)

// A producer: subscribe an endpoint to order events, publish one with an
// idempotency key (publishing again with the same key returns the same
// event), and read it back.
func Example() {
	// A Dispatch API in this process, with nothing behind it that delivers;
	// a producer uses its deployment's URL and one of DISPATCH_API_KEYS.
	baseURL, apiKey, stop := startAPI()
	defer stop()

	ctx := context.Background()
	api, err := client.NewClientWithResponses(baseURL,
		client.WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
			req.Header.Set("Authorization", "Bearer "+apiKey)
			return nil
		}))
	if err != nil {
		log.Fatal(err)
	}

	created, err := api.CreateSubscriptionWithResponse(ctx, client.SubscriptionInput{
		Url:        "https://shop.example.com/webhooks",
		EventTypes: &[]string{"order.*"},
	})
	if err != nil {
		log.Fatal(err)
	}
	if created.JSON201 == nil {
		log.Fatalf("create subscription: %s: %s", created.Status(), created.Body)
	}
	sub := created.JSON201
	// Keep sub.Secret: the endpoint verifies signatures with it.
	fmt.Println("subscribed to", *sub.EventTypes)

	publish := func() *client.Event {
		res, err := api.PublishEventWithResponse(ctx,
			&client.PublishEventParams{IdempotencyKey: new("order-ord_123-created")},
			client.PublishBody{
				Type:   "order.created",
				Source: "shop",
				Data:   json.RawMessage(`{"order_id":"ord_123","amount":4200}`),
			})
		if err != nil {
			log.Fatal(err)
		}
		switch res.StatusCode() {
		case http.StatusAccepted: // committed: it will be delivered
			fmt.Println("published")
			return res.JSON202
		case http.StatusOK: // the key was seen before: the first event
			fmt.Println("already published")
			return res.JSON200
		default:
			log.Fatalf("publish: %s: %s", res.Status(), res.Body)
			return nil
		}
	}
	first := publish()
	again := publish() // a retry after a timeout is safe
	fmt.Println("same event:", again.Id == first.Id)

	got, err := api.GetEventWithResponse(ctx, first.Id, nil)
	if err != nil {
		log.Fatal(err)
	}
	if got.JSON200 == nil {
		log.Fatalf("get event: %s: %s", got.Status(), got.Body)
	}
	fmt.Println(got.JSON200.Type, got.JSON200.Status, string(got.JSON200.Data))
	// Output:
	// subscribed to [order.*]
	// published
	// already published
	// same event: true
	// order.created pending {"order_id":"ord_123","amount":4200}
}
