package application

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// Subscriptions manages subscriptions on behalf of producers.
type Subscriptions struct {
	Store ports.SubscriptionStore
	// Guard refuses endpoint URLs that resolve to forbidden addresses.
	Guard ports.EndpointGuard
	Clock ports.Clock
	// RotationOverlap is how long a replaced secret keeps signing
	// (domain.DefaultRotationOverlap when zero).
	RotationOverlap time.Duration
	// DeleteBatch is how many deliveries Delete removes per transaction;
	// DefaultDeleteBatch when zero.
	DeleteBatch int
}

// Create validates in, checks the endpoint URL against the SSRF guard and
// stores the new subscription.
func (uc *Subscriptions) Create(ctx context.Context, in domain.NewSubscriptionInput) (domain.Subscription, error) {
	sub, err := domain.NewSubscription(in, uc.Clock.Now())
	if err != nil {
		return domain.Subscription{}, err
	}
	if err := uc.checkURL(ctx, sub.URL); err != nil {
		return domain.Subscription{}, err
	}
	if err := uc.Store.CreateSubscription(ctx, sub); err != nil {
		return domain.Subscription{}, fmt.Errorf("store subscription: %w", err)
	}
	return sub, nil
}

// Get returns subscription id, or domain.ErrNotFound.
func (uc *Subscriptions) Get(ctx context.Context, id string) (domain.Subscription, error) {
	return uc.Store.GetSubscription(ctx, id)
}

// List returns one page of subscriptions in creation order.
func (uc *Subscriptions) List(ctx context.Context, p ports.Page) ([]domain.Subscription, error) {
	return uc.Store.ListSubscriptions(ctx, p)
}

// Update applies a partial update to subscription id. A changed URL is
// checked against the SSRF guard first (DNS is not looked up inside the
// store's transaction).
func (uc *Subscriptions) Update(ctx context.Context, id string, patch domain.SubscriptionPatch) (domain.Subscription, error) {
	if patch.URL != nil {
		if err := domain.ValidateEndpointURL(*patch.URL); err != nil {
			return domain.Subscription{}, &domain.ValidationError{Field: "url", Message: err.Error()}
		}
		if err := uc.checkURL(ctx, *patch.URL); err != nil {
			return domain.Subscription{}, err
		}
	}
	now := uc.Clock.Now()
	return uc.Store.UpdateSubscription(ctx, id, func(s *domain.Subscription) error {
		return s.Apply(patch, now)
	})
}

// RotateSecret makes secret (a whsec_ string; generated when empty) the
// signing secret of subscription id. The previous one keeps signing for the
// rotation overlap, so receivers can switch without dropping a webhook.
func (uc *Subscriptions) RotateSecret(ctx context.Context, id, secret string) (domain.Subscription, error) {
	next := domain.MustGenerateSecret()
	if secret != "" {
		parsed, err := domain.ParseSecret(secret)
		if err != nil {
			return domain.Subscription{}, &domain.ValidationError{Field: "secret", Message: err.Error()}
		}
		next = parsed
	}
	overlap := uc.RotationOverlap
	if overlap == 0 {
		overlap = domain.DefaultRotationOverlap
	}
	now := uc.Clock.Now()
	return uc.Store.UpdateSubscription(ctx, id, func(s *domain.Subscription) error {
		return s.RotateSecret(next, now, overlap)
	})
}

// Delete removes subscription id with its deliveries and their attempts,
// or returns domain.ErrNotFound. It works in batches of DeleteBatch
// deliveries (DefaultDeleteBatch when zero), each one short transaction;
// from the first, the subscription reads as gone and receives nothing.
// When it fails or ctx ends midway, the subscription stays hidden, and
// deleting it again finishes the deletion.
func (uc *Subscriptions) Delete(ctx context.Context, id string) error {
	batch := cmp.Or(uc.DeleteBatch, DefaultDeleteBatch)
	for {
		done, err := uc.Store.DeleteSubscription(ctx, id, batch)
		if err != nil || done {
			return err
		}
	}
}

// DefaultDeleteBatch is Subscriptions.DeleteBatch's default: a batch short
// enough to hold its locks for milliseconds.
const DefaultDeleteBatch = 500

func (uc *Subscriptions) checkURL(ctx context.Context, rawURL string) error {
	if uc.Guard == nil {
		return nil
	}
	err := uc.Guard.CheckURL(ctx, rawURL)
	var invalid *domain.ValidationError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &invalid):
		return invalid
	case errors.Is(err, domain.ErrForbiddenDestination):
		return &domain.ValidationError{Field: "url", Message: err.Error()}
	default:
		// The resolver's words name the DNS server it asked, an address
		// of Dispatch's own network; the caller learns only the class.
		return &domain.ValidationError{Field: "url", Message: "host could not be resolved"}
	}
}
