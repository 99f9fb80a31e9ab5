package application_test

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/dispatch-webhooks/dispatch/ports"
)

// clock is a settable ports.Clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)} }

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// recordingQueue records what is published and can be told to fail.
type recordingQueue struct {
	ports.Queue // only Publish is used by the use cases under test
	mu          sync.Mutex
	published   map[string][]string
	fail        error
}

func newRecordingQueue() *recordingQueue { return &recordingQueue{published: map[string][]string{}} }

func (q *recordingQueue) Publish(_ context.Context, stream string, entries ...ports.Entry) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.fail != nil {
		return q.fail
	}
	for _, e := range entries {
		q.published[stream] = append(q.published[stream], e.Body)
	}
	return nil
}

func (q *recordingQueue) bodies(stream string) []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]string(nil), q.published[stream]...)
}

// scriptedSender answers each Send with the next scripted response.
type scriptedSender struct {
	mu       sync.Mutex
	script   []sendResult
	requests []ports.WebhookRequest
}

type sendResult struct {
	res ports.WebhookResponse
	err error
}

func answer(code int) sendResult {
	return sendResult{res: ports.WebhookResponse{StatusCode: code, Body: []byte(http.StatusText(code)), Duration: time.Millisecond}}
}

func (s *scriptedSender) Send(_ context.Context, req ports.WebhookRequest) (ports.WebhookResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, req)
	if len(s.script) == 0 {
		return ports.WebhookResponse{}, errors.New("scriptedSender: no answer scripted")
	}
	next := s.script[0]
	s.script = s.script[1:]
	return next.res, next.err
}
