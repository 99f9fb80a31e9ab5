package bootstrap_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/fx"

	"github.com/dispatch-webhooks/dispatch/bootstrap"
	"github.com/dispatch-webhooks/dispatch/client"
	"github.com/dispatch-webhooks/dispatch/domain"
	"github.com/dispatch-webhooks/dispatch/ports"
)

// warmSpy is the real store, recording its warm-ups and claims in the order
// they happen; with fail set, its warm-ups fail instead.
type warmSpy struct {
	ports.Store
	fail error

	mu    sync.Mutex
	calls []string
}

func (s *warmSpy) record(call string) {
	s.mu.Lock()
	s.calls = append(s.calls, call)
	s.mu.Unlock()
}

func (s *warmSpy) recorded() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

func (s *warmSpy) WarmIngest(ctx context.Context) error {
	s.record("warm ingest")
	if s.fail != nil {
		return s.fail
	}
	return s.Store.(interface{ WarmIngest(context.Context) error }).WarmIngest(ctx)
}

func (s *warmSpy) WarmDeliveries(ctx context.Context) error {
	s.record("warm deliveries")
	if s.fail != nil {
		return s.fail
	}
	return s.Store.(interface{ WarmDeliveries(context.Context) error }).WarmDeliveries(ctx)
}

func (s *warmSpy) ClaimDelivery(ctx context.Context, id string, now time.Time, leaseMargin time.Duration) (ports.Claimed, error) {
	s.record("claim")
	return s.Store.ClaimDelivery(ctx, id, now, leaseMargin)
}

func (s *warmSpy) TakeDelivery(ctx context.Context, fresh domain.Delivery, now time.Time, leaseMargin time.Duration) (ports.Claimed, error) {
	s.record("take")
	return s.Store.TakeDelivery(ctx, fresh, now, leaseMargin)
}

func spyOn(spy *warmSpy) fx.Option {
	return fx.Decorate(func(s ports.Store) ports.Store { spy.Store = s; return spy })
}

// TestRolesWarmUpBeforeTakingTraffic checks that the api warms its store
// while it starts, and that a worker does so before its first claim: an
// event already waiting when the worker starts is taken only after the
// warm-up (taken: its fresh entry is the one its creator appended).
func TestRolesWarmUpBeforeTakingTraffic(t *testing.T) {
	t.Parallel()
	apiSpy, workerSpy := &warmSpy{}, &warmSpy{}
	c := newClusterWith(t, nil, spyOn(apiSpy))
	if got := apiSpy.recorded(); !slices.Equal(got, []string{"warm ingest"}) {
		t.Fatalf("api's store calls on start = %v, want one ingest warm-up", got)
	}

	endpoints := newScripted(t)
	ep, url := endpoints.add("/warm", nil)
	c.subscribe(url, "warm.tested", client.SubscriptionInput{})
	id := c.publish("warm.tested", `{"n":1}`)

	c.start(bootstrap.RoleWorker, spyOn(workerSpy))
	c.waitEvent(id, "delivered", 10*time.Second)
	if len(ep.got()) != 1 {
		t.Fatalf("endpoint got %d requests, want 1", len(ep.got()))
	}
	got := workerSpy.recorded()
	if len(got) < 2 || got[0] != "warm deliveries" || !slices.Contains(got[1:], "take") {
		t.Fatalf("worker's store calls = %v, want the warm-up first and the take after it", got)
	}
}

// TestRolesStartAndDeliverWhenTheWarmUpFails drives the failure path: a
// warm-up that fails is logged, and the roles start and deliver unwarmed.
func TestRolesStartAndDeliverWhenTheWarmUpFails(t *testing.T) {
	t.Parallel()
	broken := errors.New("warm-up refused")
	apiSpy, workerSpy := &warmSpy{fail: broken}, &warmSpy{fail: broken}
	c := newClusterWith(t, nil, spyOn(apiSpy))
	c.start(bootstrap.RoleWorker, spyOn(workerSpy))

	endpoints := newScripted(t)
	ep, url := endpoints.add("/unwarmed", nil)
	c.subscribe(url, "warm.failed", client.SubscriptionInput{})
	id := c.publish("warm.failed", `{"n":1}`)
	c.waitEvent(id, "delivered", 10*time.Second)
	if len(ep.got()) != 1 {
		t.Fatalf("endpoint got %d requests, want 1", len(ep.got()))
	}
	if got := workerSpy.recorded(); len(got) == 0 || got[0] != "warm deliveries" {
		t.Fatalf("worker's store calls = %v, want a (failed) warm-up first", got)
	}
}
