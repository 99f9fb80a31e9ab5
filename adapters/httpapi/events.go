package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	segjson "github.com/segmentio/encoding/json"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// Event is an event as the API shows it, with each delivery's state.
type Event struct {
	ID            string            `json:"id" example:"evt_01JD6Z7Q2M3N4P5Q6R7S8T9V0W"`
	Type          string            `json:"type" example:"order.created"`
	Source        string            `json:"source" example:"billing"`
	Data          EventData         `json:"data"`
	OrderingKey   *string           `json:"ordering_key"`
	Status        string            `json:"status" enum:"pending,delivered,failed" doc:"pending until every delivery is terminal, then delivered, or failed if any is dead or the event could not be fanned out."`
	FailureReason *string           `json:"failure_reason" doc:"Why the event could not be fanned out, when it was settled failed for that; null otherwise."`
	CreatedAt     time.Time         `json:"created_at"`
	Deliveries    []DeliverySummary `json:"deliveries" doc:"One page of the event's deliveries, in subscription id order."`
	// DeliveriesNextCursor is null on the last page of deliveries.
	DeliveriesNextCursor *string `json:"deliveries_next_cursor" doc:"Pass as cursor to get the next page of deliveries; null on the last page."`
}

// DeliverySummary is one delivery's state within an event.
type DeliverySummary struct {
	ID             string     `json:"id"`
	SubscriptionID string     `json:"subscription_id"`
	Status         string     `json:"status" enum:"pending,delivering,retrying,delivered,dead"`
	Attempts       int        `json:"attempts"`
	NextAttemptAt  *time.Time `json:"next_attempt_at" doc:"When the next attempt is due; null once terminal."`
	LastStatusCode *int       `json:"last_status_code"`
	LastError      *string    `json:"last_error"`
}

func eventJSON(e domain.Event, ds []domain.Delivery) Event {
	out := Event{
		ID: e.ID, Type: e.Type, Source: e.Source, Data: EventData(e.Data),
		Status: string(e.Status), CreatedAt: e.CreatedAt,
		Deliveries: make([]DeliverySummary, len(ds)),
	}
	if e.OrderingKey != "" {
		out.OrderingKey = &e.OrderingKey
	}
	if e.FailureReason != "" {
		out.FailureReason = &e.FailureReason
	}
	for i, d := range ds {
		out.Deliveries[i] = deliverySummaryJSON(d)
	}
	return out
}

func deliverySummaryJSON(d domain.Delivery) DeliverySummary {
	out := DeliverySummary{ID: d.ID, SubscriptionID: d.SubscriptionID, Status: string(d.Status), Attempts: d.Attempts}
	if !d.Status.Terminal() {
		next := d.NextAttemptAt
		out.NextAttemptAt = &next
	}
	if d.LastStatusCode != 0 {
		code := d.LastStatusCode
		out.LastStatusCode = &code
	}
	if d.LastError != "" {
		msg := d.LastError
		out.LastError = &msg
	}
	return out
}

// Attempt is one recorded attempt.
type Attempt struct {
	DeliveryID     string    `json:"delivery_id"`
	SubscriptionID string    `json:"subscription_id"`
	Attempt        int       `json:"attempt" doc:"1-based."`
	StatusCode     *int      `json:"status_code" doc:"null when no response came."`
	ResponseBody   string    `json:"response_body" doc:"The first 4 KiB of the response body."`
	Error          *string   `json:"error"`
	DurationMS     float64   `json:"duration_ms"`
	CreatedAt      time.Time `json:"created_at"`
}

func attemptJSON(a domain.Attempt) Attempt {
	out := Attempt{
		DeliveryID: a.DeliveryID, SubscriptionID: a.SubscriptionID, Attempt: a.Number,
		ResponseBody: a.ResponseBody, DurationMS: float64(a.Duration.Microseconds()) / 1000,
		CreatedAt: a.CreatedAt,
	}
	if a.StatusCode != 0 {
		code := a.StatusCode
		out.StatusCode = &code
	}
	if a.Error != "" {
		msg := a.Error
		out.Error = &msg
	}
	return out
}

// PublishBody is the body of a publish.
type PublishBody struct {
	Type        string    `json:"type" minLength:"1" maxLength:"128" doc:"Dot-separated segments of [a-zA-Z0-9_-]." example:"order.created"`
	Source      string    `json:"source" maxLength:"256" doc:"Where the event comes from." example:"billing"`
	Data        EventData `json:"data"`
	OrderingKey string    `json:"ordering_key,omitempty" maxLength:"256" doc:"Orders deliveries of subscriptions whose ordering_key is /ordering_key."`
}

// publishInput takes the body raw and decodes it once, in Resolve: huma
// would decode a typed Body twice (into a map to validate it against the
// schema, then into the struct), and a publish is mostly its data. The
// checks the schema states are NewEvent's, which answer 422 by field; the
// document still shows PublishBody (registerEvents).
type publishInput struct {
	IdempotencyKey  string `header:"Idempotency-Key" maxLength:"256" doc:"Publishing again with the same key returns the first event."`
	XIdempotencyKey string `header:"X-Idempotency-Key" maxLength:"256" doc:"Alias of Idempotency-Key."`
	RawBody         []byte
	body            PublishBody
}

// Resolve decodes the body as huma would validate it: 415 for a body
// that is not JSON, 400 for malformed JSON, 422 for a field of the wrong
// type or one the schema does not have.
func (in *publishInput) Resolve(ctx huma.Context) []error {
	if ct := ctx.Header("Content-Type"); ct != "" && !isJSON(ct) {
		return []error{&statusDetail{http.StatusUnsupportedMediaType, huma.ErrorDetail{Location: "body", Message: "unknown content type: " + ct}}}
	}
	var body struct {
		PublishBody
		Schema string `json:"$schema"` // huma's link to the schema, as its responses carry it
	}
	rest, err := segjson.Parse(in.RawBody, &body, segjson.DisallowUnknownFields)
	if err == nil && len(rest) > 0 {
		err = errors.New("invalid character after top-level value")
	}
	if err == nil {
		in.body = body.PublishBody
		return nil
	}
	var mistyped *json.UnmarshalTypeError
	if errors.As(err, &mistyped) {
		return []error{&huma.ErrorDetail{
			Location: strings.TrimSuffix("body."+strings.TrimPrefix(mistyped.Field, "PublishBody."), "."),
			Message:  "expected " + mistyped.Type.Kind().String() + ", got " + mistyped.Value,
		}}
	}
	// The decoder names an unknown field only in its message.
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		field, _ := strconv.Unquote(name)
		return []error{&huma.ErrorDetail{Location: "body." + field, Message: "unexpected property"}}
	}
	return []error{&statusDetail{http.StatusBadRequest, huma.ErrorDetail{Location: "body", Message: err.Error()}}}
}

// statusDetail is an error detail that sets the answer's status (huma's
// StatusError), as huma answers a body it cannot parse: 400 or 415, where
// a detail alone answers 422.
type statusDetail struct {
	status int
	detail huma.ErrorDetail
}

func (e *statusDetail) Error() string                  { return e.detail.Error() }
func (e *statusDetail) ErrorDetail() *huma.ErrorDetail { return &e.detail }
func (e *statusDetail) GetStatus() int                 { return e.status }

// isJSON reports whether a Content-Type names JSON, as huma's own formats
// match it: application/json or any +json type, with parameters.
func isJSON(contentType string) bool {
	media, _, _ := strings.Cut(contentType, ";")
	media = strings.ToLower(strings.TrimSpace(media))
	return media == "application/json" || strings.HasSuffix(media, "+json")
}

type publishOutput struct {
	Status   int
	Replayed string `header:"Idempotent-Replayed" doc:"true when the idempotency key matched an earlier event."`
	Body     Event
}

type getEventInput struct {
	ID     string `path:"id" maxLength:"64" doc:"Event id."`
	Limit  int    `query:"limit" minimum:"1" maximum:"500" default:"50" doc:"Deliveries per page."`
	Cursor string `query:"cursor" maxLength:"128" doc:"deliveries_next_cursor of the previous page."`
}

type listEventAttemptsInput struct {
	ID     string `path:"id" maxLength:"64" doc:"Event id."`
	Limit  int    `query:"limit" minimum:"1" maximum:"500" default:"50" doc:"Page size."`
	Cursor string `query:"cursor" maxLength:"128" doc:"next_cursor of the previous page."`
}

type eventOutput struct {
	Body Event
}

type attemptsOutput struct {
	Body List[Attempt]
}

func (h *handlers) registerEvents(api huma.API) {
	tags := []string{"Events"}
	huma.Register(api, huma.Operation{
		OperationID: publishOperation, Method: http.MethodPost, Path: publishPath,
		Summary: "Publish an event", DefaultStatus: http.StatusAccepted, Tags: tags,
		Description: "Commits the event durably and queues it for delivery to every matching subscription. " +
			"202 means the event is committed. With an idempotency key seen before, answers 200 with the original event.",
		MaxBodyBytes: h.maxEventBytes,
		// The document shows PublishBody; publishInput.Resolve decodes it.
		RequestBody: &huma.RequestBody{Required: true, Content: map[string]*huma.MediaType{"application/json": {
			Schema: api.OpenAPI().Components.Schemas.Schema(reflect.TypeFor[PublishBody](), true, "PublishBody"),
		}}},
		SkipValidateBody: true,
		Responses:        map[string]*huma.Response{"200": {Description: "The event first published with this idempotency key.", Content: map[string]*huma.MediaType{"application/json": {Schema: &huma.Schema{Ref: "#/components/schemas/Event"}}}}},
		Errors:           []int{http.StatusBadRequest, http.StatusUnauthorized, http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType, http.StatusUnprocessableEntity, http.StatusInternalServerError},
	}, func(ctx context.Context, in *publishInput) (*publishOutput, error) {
		return h.publish(ctx, in.body, in.IdempotencyKey, in.XIdempotencyKey)
	})
	// RawBody adds a binary media type to the document; the body is JSON
	// only.
	delete(api.OpenAPI().Paths[publishPath].Post.RequestBody.Content, "application/octet-stream")

	huma.Register(api, huma.Operation{
		OperationID: "get-event", Method: http.MethodGet, Path: "/v1/events/{id}",
		Summary: "Get an event", Tags: tags,
		Description: "The event, its status, and one page of its deliveries with each one's status " +
			"(deliveries_next_cursor leads to the next). The status covers every delivery, not only the page.",
		Errors: []int{http.StatusBadRequest, http.StatusUnauthorized, http.StatusNotFound, http.StatusUnprocessableEntity},
	}, func(ctx context.Context, in *getEventInput) (*eventOutput, error) {
		after, err := decodeCursor(in.Cursor)
		if err != nil {
			return nil, err
		}
		view, err := h.events.Get(ctx, in.ID, ports.Page{After: after, Limit: in.Limit + 1})
		if err != nil {
			return nil, problem(ctx, h.log, err)
		}
		page, next := paginate(view.Deliveries, in.Limit, func(d domain.Delivery) string { return d.SubscriptionID })
		out := &eventOutput{Body: eventJSON(view.Event, page)}
		out.Body.DeliveriesNextCursor = next
		return out, nil
	})

	huma.Register(api, huma.Operation{
		OperationID: "list-event-attempts", Method: http.MethodGet, Path: "/v1/events/{id}/attempts",
		Summary: "List an event's attempts", Tags: tags,
		Description: "The attempts of every delivery of the event, one page at a time, by subscription id then attempt number.",
		Errors:      []int{http.StatusBadRequest, http.StatusUnauthorized, http.StatusNotFound, http.StatusUnprocessableEntity},
	}, func(ctx context.Context, in *listEventAttemptsInput) (*attemptsOutput, error) {
		after, err := decodeAttemptCursor(in.Cursor)
		if err != nil {
			return nil, err
		}
		after.Limit = in.Limit + 1
		attempts, err := h.events.Attempts(ctx, in.ID, after)
		if err != nil {
			return nil, problem(ctx, h.log, err)
		}
		page, next := paginate(attempts, in.Limit, attemptCursorKey)
		out := &attemptsOutput{Body: List[Attempt]{Data: make([]Attempt, len(page)), NextCursor: next}}
		for i, a := range page {
			out.Body.Data[i] = attemptJSON(a)
		}
		return out, nil
	})
}

// publish is the publish operation.
func (h *handlers) publish(ctx context.Context, body PublishBody, idempotencyKey, xIdempotencyKey string) (*publishOutput, error) {
	key := idempotencyKey
	if key == "" {
		key = xIdempotencyKey
	}
	res, err := h.ingest.Publish(ctx, domain.NewEventInput{
		Type: body.Type, Source: body.Source, Data: []byte(body.Data),
		OrderingKey: body.OrderingKey, IdempotencyKey: key,
		// The decoder checked the whole body before it handed Data
		// over: NewEvent need not scan it again when it is compact.
		DataChecked: true,
	})
	if err != nil {
		return nil, problem(ctx, h.log, err)
	}
	if !res.Replayed && h.accepted != nil {
		h.accepted()
	}
	if res.EnqueueErr != nil {
		h.log.WarnContext(ctx, "event committed but not enqueued; the scheduler will enqueue it",
			"event_id", res.Event.ID, "error", res.EnqueueErr)
	}
	out := &publishOutput{Status: http.StatusAccepted, Body: eventJSON(res.Event, nil)}
	if res.Replayed {
		out.Status, out.Replayed = http.StatusOK, "true"
	}
	return out, nil
}
