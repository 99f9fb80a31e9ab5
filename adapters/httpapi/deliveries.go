package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// Delivery is one delivery with, when asked for alone, its attempts.
type Delivery struct {
	ID             string     `json:"id" example:"dlv_01JD6Z7Q2M3N4P5Q6R7S8T9V0W"`
	EventID        string     `json:"event_id"`
	SubscriptionID string     `json:"subscription_id"`
	Status         string     `json:"status" enum:"pending,delivering,retrying,delivered,dead"`
	Attempts       int        `json:"attempts" doc:"Attempts made so far."`
	NextAttemptAt  *time.Time `json:"next_attempt_at" doc:"When the next attempt is due; null once terminal."`
	LastStatusCode *int       `json:"last_status_code"`
	LastError      *string    `json:"last_error"`
	Reason         *string    `json:"reason" doc:"Why the delivery was last postponed without an attempt: throttled or circuit_open."`
	CreatedAt      time.Time  `json:"created_at"`
	UpdatedAt      time.Time  `json:"updated_at"`
	AttemptLog     []Attempt  `json:"attempt_log,omitempty" doc:"Every attempt, oldest first (only on GET /v1/deliveries/{id})."`
}

func deliveryJSON(d domain.Delivery) Delivery {
	s := deliverySummaryJSON(d)
	out := Delivery{
		ID: d.ID, EventID: d.EventID, SubscriptionID: d.SubscriptionID, Status: s.Status, Attempts: d.Attempts,
		NextAttemptAt: s.NextAttemptAt, LastStatusCode: s.LastStatusCode, LastError: s.LastError,
		CreatedAt: d.CreatedAt, UpdatedAt: d.UpdatedAt,
	}
	if d.Reason != "" {
		reason := d.Reason
		out.Reason = &reason
	}
	return out
}

type listDeliveriesInput struct {
	SubscriptionID string `query:"subscription_id" maxLength:"64" doc:"Only this subscription's deliveries."`
	EventID        string `query:"event_id" maxLength:"64" doc:"Only this event's deliveries."`
	Status         string `query:"status" enum:"pending,delivering,retrying,delivered,dead" doc:"Only deliveries in this status (dead = the dead-letter queue)."`
	Limit          int    `query:"limit" minimum:"1" maximum:"500" default:"50" doc:"Page size."`
	Cursor         string `query:"cursor" maxLength:"128" doc:"next_cursor of the previous page."`
}

type listDeliveriesOutput struct {
	Body List[Delivery]
}

type deliveryIDInput struct {
	ID string `path:"id" maxLength:"64" doc:"Delivery id."`
}

type deliveryOutput struct {
	Body Delivery
}

type retryOutput struct {
	Body Delivery
}

func (h *handlers) registerDeliveries(api huma.API) {
	tags := []string{"Deliveries"}
	huma.Register(api, huma.Operation{
		OperationID: "list-deliveries", Method: http.MethodGet, Path: "/v1/deliveries",
		Summary: "List deliveries", Tags: tags,
		Description: "Deliveries in creation order, filtered by subscription, event and status; status=dead lists the dead letters.",
	}, func(ctx context.Context, in *listDeliveriesInput) (*listDeliveriesOutput, error) {
		f := ports.DeliveryFilter{SubscriptionID: in.SubscriptionID, EventID: in.EventID, Status: domain.DeliveryStatus(in.Status)}
		fetch := func(ctx context.Context, p ports.Page) ([]domain.Delivery, error) {
			return h.deliveries.List(ctx, f, p)
		}
		list, err := listPage(ctx, h, in.Cursor, in.Limit, fetch, func(d domain.Delivery) string { return d.ID }, deliveryJSON)
		return &listDeliveriesOutput{Body: list}, err
	})

	huma.Register(api, huma.Operation{
		OperationID: "get-delivery", Method: http.MethodGet, Path: "/v1/deliveries/{id}",
		Summary: "Get a delivery with its attempts", Tags: tags,
	}, func(ctx context.Context, in *deliveryIDInput) (*deliveryOutput, error) {
		view, err := h.deliveries.Get(ctx, in.ID)
		if err != nil {
			return nil, problem(ctx, h.log, err)
		}
		out := deliveryJSON(view.Delivery)
		out.AttemptLog = make([]Attempt, len(view.Attempts))
		for i, a := range view.Attempts {
			out.AttemptLog[i] = attemptJSON(a)
		}
		return &deliveryOutput{Body: out}, nil
	})

	huma.Register(api, huma.Operation{
		OperationID: "retry-delivery", Method: http.MethodPost, Path: "/v1/deliveries/{id}/retry",
		Summary: "Retry a delivery", DefaultStatus: http.StatusAccepted, Tags: tags,
		Description: "Sends a dead (or retrying) delivery again now. It gets one more attempt; " +
			"its event goes back to pending. 409 for a delivery that is pending, being delivered or delivered.",
	}, func(ctx context.Context, in *deliveryIDInput) (*retryOutput, error) {
		d, err := h.deliveries.Retry(ctx, in.ID)
		if err != nil {
			return nil, problem(ctx, h.log, err)
		}
		return &retryOutput{Body: deliveryJSON(d)}, nil
	})
}
