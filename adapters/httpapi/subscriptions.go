package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/dispatch-webhooks/dispatch/domain"
)

// RetryPolicy is a subscription's retry policy in JSON.
type RetryPolicy struct {
	Strategy        string     `json:"strategy,omitempty" enum:"exponential,schedule" doc:"exponential (default) or schedule"`
	InitialInterval *Duration  `json:"initial_interval,omitempty" doc:"Delay before the second attempt (exponential)."`
	Multiplier      float64    `json:"multiplier,omitempty" minimum:"1" maximum:"10" doc:"Growth factor between delays (exponential)."`
	MaxInterval     *Duration  `json:"max_interval,omitempty" doc:"Longest delay; also caps Retry-After."`
	Jitter          *float64   `json:"jitter,omitempty" minimum:"0" maximum:"1" doc:"Random spread of each delay, as a fraction (0.1 = ±10%, the default; 0 means the default)."`
	MaxAttempts     int        `json:"max_attempts,omitempty" minimum:"1" maximum:"100" doc:"Attempts in all, counting the first."`
	Schedule        []Duration `json:"schedule,omitempty" maxItems:"100" doc:"Delays before attempts 2, 3, … (schedule)."`
}

func (p *RetryPolicy) toDomain() domain.RetryPolicy {
	out := domain.RetryPolicy{
		Strategy:    domain.RetryStrategy(p.Strategy),
		Multiplier:  p.Multiplier,
		MaxAttempts: p.MaxAttempts,
	}
	if p.InitialInterval != nil {
		out.InitialInterval = time.Duration(*p.InitialInterval)
	}
	if p.MaxInterval != nil {
		out.MaxInterval = time.Duration(*p.MaxInterval)
	}
	if p.Jitter != nil {
		out.Jitter = *p.Jitter
	}
	for _, d := range p.Schedule {
		out.Schedule = append(out.Schedule, time.Duration(d))
	}
	return out
}

func retryPolicyJSON(p domain.RetryPolicy) RetryPolicy {
	initial, maxInterval, jitter := Duration(p.InitialInterval), Duration(p.MaxInterval), p.Jitter
	out := RetryPolicy{
		Strategy:        string(p.Strategy),
		InitialInterval: &initial,
		Multiplier:      p.Multiplier,
		MaxInterval:     &maxInterval,
		Jitter:          &jitter,
		MaxAttempts:     p.MaxAttempts,
	}
	for _, d := range p.Schedule {
		out.Schedule = append(out.Schedule, Duration(d))
	}
	return out
}

// Subscription is a subscription as the API shows it.
type Subscription struct {
	ID             string            `json:"id" example:"sub_01JD6Z7Q2M3N4P5Q6R7S8T9V0W"`
	URL            string            `json:"url" example:"https://example.com/webhooks"`
	EventTypes     []string          `json:"event_types" example:"[\"order.*\"]"`
	Description    string            `json:"description"`
	Active         bool              `json:"active"`
	DisabledReason *string           `json:"disabled_reason" doc:"Why the subscription was disabled (\"gone\" after a 410); null when active."`
	RateLimit      int               `json:"rate_limit" doc:"Requests per second."`
	MaxInFlight    int               `json:"max_in_flight"`
	Timeout        Duration          `json:"timeout"`
	RetryPolicy    RetryPolicy       `json:"retry_policy"`
	OrderingKey    *string           `json:"ordering_key"`
	Headers        map[string]string `json:"headers" doc:"Custom request headers by name; every value reads as \"***\": values are credentials, never returned."`
	CreatedAt      time.Time         `json:"created_at"`
	UpdatedAt      time.Time         `json:"updated_at"`
	Secret         string            `json:"secret,omitempty" doc:"Only in the answers of create, rotate-secret and get-secret."`
}

func subscriptionJSON(s domain.Subscription) Subscription {
	out := Subscription{
		ID:          s.ID,
		URL:         s.URL,
		EventTypes:  s.EventTypes,
		Description: s.Description,
		Active:      s.Active,
		RateLimit:   s.RateLimit,
		MaxInFlight: s.MaxInFlight,
		Timeout:     Duration(s.Timeout),
		RetryPolicy: retryPolicyJSON(s.RetryPolicy),
		Headers:     redactedHeaders(s.Headers),
		CreatedAt:   s.CreatedAt,
		UpdatedAt:   s.UpdatedAt,
	}
	if s.DisabledReason != "" {
		out.DisabledReason = &s.DisabledReason
	}
	if s.OrderingKey != "" {
		out.OrderingKey = &s.OrderingKey
	}
	return out
}

// redactedHeaders is headers with every value replaced by
// domain.RedactedHeaderValue: no read returns a header value.
func redactedHeaders(headers map[string]string) map[string]string {
	out := make(map[string]string, len(headers))
	for name := range headers {
		out[name] = domain.RedactedHeaderValue
	}
	return out
}

// SubscriptionInput is the body of a create.
type SubscriptionInput struct {
	URL         string            `json:"url" maxLength:"2048" doc:"The endpoint: an absolute http(s) URL." example:"https://example.com/webhooks"`
	EventTypes  []string          `json:"event_types" minItems:"1" maxItems:"100" doc:"Event types to receive: exact types, \"*\" for all, or a prefix such as \"order.*\"." example:"[\"order.*\"]"`
	Secret      string            `json:"secret,omitempty" doc:"A whsec_ signing secret; generated when absent."`
	Description string            `json:"description,omitempty" maxLength:"1024"`
	RateLimit   int               `json:"rate_limit,omitempty" minimum:"1" maximum:"10000" doc:"Requests per second (default 100)."`
	MaxInFlight int               `json:"max_in_flight,omitempty" minimum:"1" maximum:"1000" doc:"Concurrent requests (default 100)."`
	Timeout     *Duration         `json:"timeout,omitempty" doc:"Per-request timeout (default 10s, at most 60s)."`
	RetryPolicy *RetryPolicy      `json:"retry_policy,omitempty"`
	OrderingKey string            `json:"ordering_key,omitempty" doc:"A JSON pointer into the event (e.g. /data/customer_id, or /ordering_key for the event's own key): deliveries with the same key arrive in order." example:"/data/customer_id"`
	Headers     map[string]string `json:"headers,omitempty" doc:"Extra request headers. Values are write-only: reads show \"***\"."`
	Active      *bool             `json:"active,omitempty" doc:"Default true."`
}

type createSubscriptionInput struct {
	Body SubscriptionInput
}

type subscriptionOutput struct {
	Body Subscription
}

type subscriptionIDInput struct {
	ID string `path:"id" maxLength:"64" doc:"Subscription id."`
}

type listSubscriptionsInput struct {
	Limit  int    `query:"limit" minimum:"1" maximum:"500" default:"50" doc:"Page size."`
	Cursor string `query:"cursor" maxLength:"128" doc:"next_cursor of the previous page."`
}

type listSubscriptionsOutput struct {
	Body List[Subscription]
}

// SubscriptionPatch is the body of a partial update: absent fields stay as
// they are.
type SubscriptionPatch struct {
	URL         *string            `json:"url,omitempty" maxLength:"2048"`
	EventTypes  *[]string          `json:"event_types,omitempty" minItems:"1" maxItems:"100"`
	Description *string            `json:"description,omitempty" maxLength:"1024"`
	RateLimit   *int               `json:"rate_limit,omitempty" minimum:"1" maximum:"10000"`
	MaxInFlight *int               `json:"max_in_flight,omitempty" minimum:"1" maximum:"1000"`
	Timeout     *Duration          `json:"timeout,omitempty"`
	RetryPolicy *RetryPolicy       `json:"retry_policy,omitempty" doc:"Replaces the whole policy."`
	OrderingKey *string            `json:"ordering_key,omitempty" doc:"A JSON pointer; \"\" turns ordering off."`
	Headers     *map[string]string `json:"headers,omitempty" doc:"Replaces all custom headers. A value of \"***\" (as reads show it) keeps that header's stored value, so a client can send back what it read and change only some values."`
	Active      *bool              `json:"active,omitempty" doc:"true re-enables a disabled subscription and clears disabled_reason."`
}

func (p SubscriptionPatch) toDomain() domain.SubscriptionPatch {
	out := domain.SubscriptionPatch{
		URL: p.URL, EventTypes: p.EventTypes, Description: p.Description, RateLimit: p.RateLimit,
		MaxInFlight: p.MaxInFlight, OrderingKey: p.OrderingKey, Headers: p.Headers, Active: p.Active,
	}
	if p.Timeout != nil {
		d := time.Duration(*p.Timeout)
		out.Timeout = &d
	}
	if p.RetryPolicy != nil {
		rp := p.RetryPolicy.toDomain()
		out.RetryPolicy = &rp
	}
	return out
}

type patchSubscriptionInput struct {
	ID   string `path:"id" maxLength:"64" doc:"Subscription id."`
	Body SubscriptionPatch
}

type rotateSecretInput struct {
	ID   string `path:"id" maxLength:"64" doc:"Subscription id."`
	Body *struct {
		Secret string `json:"secret,omitempty" doc:"The new whsec_ secret; generated when absent."`
	}
}

// SecretOutput is a subscription's signing secret.
type SecretOutput struct {
	Secret string `json:"secret" doc:"The current signing secret (whsec_…)." example:"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"`
	// PreviousSecretExpiresAt is set while a replaced secret still signs.
	PreviousSecretExpiresAt *time.Time `json:"previous_secret_expires_at" doc:"Until when the replaced secret keeps signing too; null when none does."`
}

type secretOutput struct {
	Body SecretOutput
}

func secretJSON(s domain.Subscription, now time.Time) SecretOutput {
	out := SecretOutput{Secret: s.Secret.Reveal()}
	if !s.PreviousSecret.IsZero() && s.PreviousSecretExpiresAt.After(now) {
		at := s.PreviousSecretExpiresAt
		out.PreviousSecretExpiresAt = &at
	}
	return out
}

type recoverInput struct {
	ID   string `path:"id" maxLength:"64" doc:"Subscription id."`
	Body struct {
		Since time.Time `json:"since" doc:"Re-deliver deliveries that died at or after this time (RFC 3339)."`
	}
}

type recoverOutput struct {
	Body struct {
		Count int `json:"count" doc:"How many dead deliveries were sent again."`
	}
}

func (h *handlers) registerSubscriptions(api huma.API) {
	tags := []string{"Subscriptions"}
	huma.Register(api, huma.Operation{
		OperationID: "create-subscription", Method: http.MethodPost, Path: "/v1/subscriptions",
		Summary: "Create a subscription", DefaultStatus: http.StatusCreated, Tags: tags,
		Description: "Subscribes an endpoint to event types. The answer carries the signing secret.",
	}, func(ctx context.Context, in *createSubscriptionInput) (*subscriptionOutput, error) {
		b := in.Body
		create := domain.NewSubscriptionInput{
			URL: b.URL, EventTypes: b.EventTypes, Description: b.Description, Secret: b.Secret,
			RateLimit: b.RateLimit, MaxInFlight: b.MaxInFlight, OrderingKey: b.OrderingKey,
			Headers: b.Headers, Active: b.Active,
		}
		if b.Timeout != nil {
			create.Timeout = time.Duration(*b.Timeout)
		}
		if b.RetryPolicy != nil {
			p := b.RetryPolicy.toDomain()
			create.RetryPolicy = &p
		}
		sub, err := h.subscriptions.Create(ctx, create)
		if err != nil {
			return nil, problem(ctx, h.log, err)
		}
		out := subscriptionJSON(sub)
		out.Secret = sub.Secret.Reveal()
		return &subscriptionOutput{Body: out}, nil
	})

	huma.Register(api, huma.Operation{
		OperationID: "list-subscriptions", Method: http.MethodGet, Path: "/v1/subscriptions",
		Summary: "List subscriptions", Tags: tags,
		Description: "Subscriptions in creation order, a page at a time.",
	}, func(ctx context.Context, in *listSubscriptionsInput) (*listSubscriptionsOutput, error) {
		list, err := listPage(ctx, h, in.Cursor, in.Limit, h.subscriptions.List,
			func(s domain.Subscription) string { return s.ID }, subscriptionJSON)
		return &listSubscriptionsOutput{Body: list}, err
	})

	huma.Register(api, huma.Operation{
		OperationID: "get-subscription", Method: http.MethodGet, Path: "/v1/subscriptions/{id}",
		Summary: "Get a subscription", Tags: tags,
	}, func(ctx context.Context, in *subscriptionIDInput) (*subscriptionOutput, error) {
		sub, err := h.subscriptions.Get(ctx, in.ID)
		if err != nil {
			return nil, problem(ctx, h.log, err)
		}
		return &subscriptionOutput{Body: subscriptionJSON(sub)}, nil
	})

	huma.Register(api, huma.Operation{
		OperationID: "update-subscription", Method: http.MethodPatch, Path: "/v1/subscriptions/{id}",
		Summary: "Update a subscription", Tags: tags,
		Description: "Partial update: only the fields present change. The result is validated as a whole.",
	}, func(ctx context.Context, in *patchSubscriptionInput) (*subscriptionOutput, error) {
		sub, err := h.subscriptions.Update(ctx, in.ID, in.Body.toDomain())
		if err != nil {
			return nil, problem(ctx, h.log, err)
		}
		return &subscriptionOutput{Body: subscriptionJSON(sub)}, nil
	})

	huma.Register(api, huma.Operation{
		OperationID: "rotate-subscription-secret", Method: http.MethodPost, Path: "/v1/subscriptions/{id}/rotate-secret",
		Summary: "Rotate a subscription's signing secret", Tags: tags,
		Description: "Replaces the signing secret. The previous one keeps signing too (both signatures in " +
			"webhook-signature) until previous_secret_expires_at, 24 h by default.",
	}, func(ctx context.Context, in *rotateSecretInput) (*secretOutput, error) {
		var secret string
		if in.Body != nil {
			secret = in.Body.Secret
		}
		sub, err := h.subscriptions.RotateSecret(ctx, in.ID, secret)
		if err != nil {
			return nil, problem(ctx, h.log, err)
		}
		return &secretOutput{Body: secretJSON(sub, sub.UpdatedAt)}, nil
	})

	huma.Register(api, huma.Operation{
		OperationID: "get-subscription-secret", Method: http.MethodGet, Path: "/v1/subscriptions/{id}/secret",
		Summary: "Get a subscription's signing secret", Tags: tags,
		Description: "The only read that returns the secret, besides create and rotate-secret.",
	}, func(ctx context.Context, in *subscriptionIDInput) (*secretOutput, error) {
		sub, err := h.subscriptions.Get(ctx, in.ID)
		if err != nil {
			return nil, problem(ctx, h.log, err)
		}
		return &secretOutput{Body: secretJSON(sub, h.subscriptions.Clock.Now())}, nil
	})

	huma.Register(api, huma.Operation{
		OperationID: "recover-subscription", Method: http.MethodPost, Path: "/v1/subscriptions/{id}/recover",
		Summary: "Re-deliver a subscription's dead deliveries", DefaultStatus: http.StatusAccepted, Tags: tags,
		Description: "Sends again every delivery of the subscription that died at or after since, a batch at a time; " +
			"count is how many were sent again.",
	}, func(ctx context.Context, in *recoverInput) (*recoverOutput, error) {
		n, err := h.deliveries.Recover(ctx, in.ID, in.Body.Since)
		if err != nil {
			return nil, problem(ctx, h.log, err)
		}
		out := &recoverOutput{}
		out.Body.Count = n
		return out, nil
	})

	huma.Register(api, huma.Operation{
		OperationID: "delete-subscription", Method: http.MethodDelete, Path: "/v1/subscriptions/{id}",
		Summary: "Delete a subscription", DefaultStatus: http.StatusNoContent, Tags: tags,
		Description: "Deletes the subscription with its deliveries and their attempts, a batch at a time. " +
			"From the first batch the subscription reads as gone (404) and receives nothing; " +
			"when a deletion is interrupted, deleting the subscription again finishes it (204).",
	}, func(ctx context.Context, in *subscriptionIDInput) (*struct{}, error) {
		if err := h.subscriptions.Delete(ctx, in.ID); err != nil {
			return nil, problem(ctx, h.log, err)
		}
		return nil, nil
	})
}
