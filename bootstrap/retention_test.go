package bootstrap_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatch-webhooks/dispatch/bootstrap"
	"github.com/dispatch-webhooks/dispatch/client"
	"github.com/dispatch-webhooks/dispatch/domain"
)

// TestRetentionDropsDeliveredHistoryAndKeepsWhatIsRetrying: with
// DISPATCH_RETENTION=1m, a delivered event, its delivery and attempts read
// 404 and their rows are gone within 3 minutes, while an event whose
// delivery waits 100 s for its next attempt stays, with its rows, until
// the delivery is terminal, and then goes too. Runs in real time: about
// three minutes.
func TestRetentionDropsDeliveredHistoryAndKeepsWhatIsRetrying(t *testing.T) {
	t.Parallel()
	c := newCluster(t, func(cfg *bootstrap.Config) { cfg.Retention = time.Minute })
	c.start(bootstrap.RoleWorker)
	c.start(bootstrap.RoleScheduler)
	db, err := pgxpool.New(t.Context(), c.cfg.DatabaseURL)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	rows := func(eventID string) (events, deliveries, attempts int) {
		t.Helper()
		require.NoError(t, db.QueryRow(t.Context(), `SELECT
			(SELECT count(*) FROM events WHERE id = $1),
			(SELECT count(*) FROM deliveries WHERE event_id = $1),
			(SELECT count(*) FROM attempts a JOIN deliveries d ON d.id = a.delivery_id WHERE d.event_id = $1)`,
			eventID).Scan(&events, &deliveries, &attempts))
		return events, deliveries, attempts
	}
	gone := func(what string, get func() (int, error)) func() bool {
		return func() bool {
			status, err := get()
			require.NoError(t, err, what)
			require.Contains(t, []int{http.StatusOK, http.StatusNotFound}, status, what)
			return status == http.StatusNotFound
		}
	}
	getEvent := func(id string) func() (int, error) {
		return func() (int, error) {
			res, err := c.api.GetEventWithResponse(t.Context(), id, nil)
			if err != nil {
				return 0, err
			}
			return res.StatusCode(), nil
		}
	}

	hooks := newScripted(t)
	_, retryURL := hooks.add("/retry", sequence(http.StatusInternalServerError, http.StatusOK))
	_, okURL := hooks.add("/ok", sequence(http.StatusOK))
	c.subscribe(retryURL, "order.retried", client.SubscriptionInput{RetryPolicy: &client.RetryPolicy{
		InitialInterval: new("100s"), Multiplier: new(1.0), Jitter: new(0.0), MaxAttempts: new(int64(3))}})
	c.subscribe(okURL, "order.done", client.SubscriptionInput{})

	retrying := c.publish("order.retried", `{}`)
	waitFor(t, 30*time.Second, "the first attempt of "+retrying, func() bool { return len(c.attempts(retrying)) == 1 })
	// The delivered event in a later window (15 s) than the retrying one,
	// so it does not wait for it.
	publishedAt, err := domain.IDTime(domain.EventIDPrefix, retrying)
	require.NoError(t, err)
	waitFor(t, 30*time.Second, "a window to pass", func() bool { return time.Since(publishedAt) > 16*time.Second })
	delivered := c.publish("order.done", `{}`)
	ev := c.waitEvent(delivered, "delivered", 30*time.Second)
	require.Len(t, ev.Deliveries, 1)
	deliveryID := ev.Deliveries[0].Id
	events, deliveries, attempts := rows(delivered)
	require.Equal(t, [3]int{1, 1, 1}, [3]int{events, deliveries, attempts})

	waitFor(t, 3*time.Minute, "the delivered event to read 404", gone("get event", getEvent(delivered)))
	res, err := c.api.GetDeliveryWithResponse(t.Context(), deliveryID)
	require.NoError(t, err)
	assert.Equal(t, http.StatusNotFound, res.StatusCode(), "its delivery reads 404")
	events, deliveries, attempts = rows(delivered)
	assert.Equal(t, [3]int{0, 0, 0}, [3]int{events, deliveries, attempts}, "its rows are gone")

	// Its first attempt 100 s ago at most, the retrying delivery waits.
	still := c.getEvent(retrying)
	assert.Equal(t, client.EventStatus("pending"), still.Status)
	events, deliveries, attempts = rows(retrying)
	assert.Equal(t, [3]int{1, 1, 1}, [3]int{events, deliveries, attempts}, "the retrying event keeps its rows")

	c.waitEvent(retrying, "delivered", 2*time.Minute)
	waitFor(t, 3*time.Minute, "the retried event to read 404 once delivered", gone("get event", getEvent(retrying)))
	events, deliveries, attempts = rows(retrying)
	assert.Equal(t, [3]int{0, 0, 0}, [3]int{events, deliveries, attempts})
}
