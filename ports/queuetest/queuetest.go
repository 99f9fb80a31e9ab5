// Package queuetest is the contract test suite of ports.Queue. Every queue
// adapter runs it (the watermill pubsub/tests idea): one suite, with a
// Features value for what differs between adapters, instead of forked tests.
//
//	func TestQueue(t *testing.T) {
//		queuetest.Run(t, func(t *testing.T) ports.Queue { return newQueue(t) }, queuetest.Features{})
//	}
//
// Rule of dependency: imports ports, the standard library and testify; no
// adapter. Adapters import it from their tests.
package queuetest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatch-webhooks/dispatch/ports"
)

// Features says what an adapter can do for the suite beyond the port.
type Features struct {
	// AdvanceIdle, when set, moves the clock q measures idle times with by
	// d, so that every pending entry of q looks d older. The suite then
	// tests minIdle exactly and without waiting. When nil the suite uses
	// real time: a short minIdle (RealMinIdle) polled with a deadline.
	AdvanceIdle func(t *testing.T, q ports.Queue, d time.Duration)
	// DropEntryData, when set, deletes the data of entry id from stream in
	// q while leaving it pending, the way stream trimming does, so the suite
	// checks that Reclaim acknowledges such an entry and does not return
	// it. When nil that test is not run.
	DropEntryData func(t *testing.T, q ports.Queue, stream, id string)
	// TrimApproximate says Trim may keep entries it could have removed, as
	// the port allows (XTRIM ~ keeps whole macro-nodes). The suite then
	// checks only that Trim keeps what it must. When false it also checks
	// that Trim removes every entry before the oldest one a group still
	// needs. A queue whose Trim does nothing, leaving old entries to the
	// broker's retention (Kafka), sets it too.
	TrimApproximate bool
	// TrimMayRedeliver says Trim may hand out again, at least once, entries
	// a group acknowledged after an entry it still holds (NATS server 2.9:
	// a purge below a consumer's ack floor can lose its acknowledgements
	// above the floor). Dispatch's consumers take such an entry for what
	// it is, a duplicate: its delivery is found settled. The suite then
	// accepts them back after a Trim, and still checks that the pending
	// entry is kept and everything goes once all is acknowledged.
	TrimMayRedeliver bool
	// RedeliverAfter, when above 0, says the queue itself hands an entry
	// read and not acknowledged for this long to the next Read of its group
	// (JetStream's AckWait), and that Reclaim therefore returns nothing:
	// returning such entries too would have the scheduler, which appends
	// again what Reclaim returns, double every redelivery. The suite then
	// checks through Read what it checks through Reclaim otherwise: entries
	// come back once idle this long, not before, with their keys and
	// bodies, and acknowledged ones never. The adapter's test sets it to the
	// queue's visibility timeout, a few seconds at most.
	RedeliverAfter time.Duration
	// Restart, when set, stops q the way a process stops (connections
	// closed, nothing acknowledged on the way out) and returns a new queue
	// on the same broker and prefix: the process that took its place. The
	// suite then checks that no entry is lost across the restart: those
	// read but not acknowledged before it are handed out again after it,
	// by Read (Kafka: from the committed offset) or by Reclaim (Redis: the
	// entries stay pending). When nil that test is not run: an in-process
	// queue does not outlive its process.
	Restart func(t *testing.T, q ports.Queue) ports.Queue
}

// Idle times the suite uses.
const (
	// ClockMinIdle is the minIdle of Reclaim when Features.AdvanceIdle drives
	// the clock: long, so real time passing during the test never matters.
	ClockMinIdle = time.Hour
	// RealMinIdle is the minIdle of Reclaim in real time: short, so tests
	// stay quick; the suite polls instead of sleeping.
	RealMinIdle = 50 * time.Millisecond
	// waitFor bounds every poll; generous for a loaded CI machine.
	waitFor = 10 * time.Second
)

// streamName is the stream every test uses; each test has its own queue.
const streamName = "contract"

// Run runs the contract suite. newQueue returns a fresh, empty queue for one
// test (a new instance, or a shared server with a key prefix per test);
// tests run in parallel.
func Run(t *testing.T, newQueue func(t *testing.T) ports.Queue, features Features) {
	t.Helper()
	s := suite{newQueue: newQueue, f: features}
	tests := []struct {
		name string
		fn   func(t *testing.T)
	}{
		{"PublishReadOrder", s.testPublishReadOrder},
		{"KeysComeBackAndKeepTheirOrder", s.testKeys},
		{"ReadCount", s.testReadCount},
		{"ReadCountAcrossKeys", s.testReadCountAcrossKeys},
		{"ReadWokenReturnsAtMostCount", s.testReadWokenReturnsAtMostCount},
		{"ReadBeforePublish", s.testReadBeforePublish},
		{"OneGroupSeesEachEntryOnce", s.testOneGroupSeesEachEntryOnce},
		{"GroupsAreIndependent", s.testGroupsAreIndependent},
		{"StreamsAreIndependent", s.testStreamsAreIndependent},
		{"ReadBlocksThenReturnsEmpty", s.testReadBlocksThenReturnsEmpty},
		{"ReadZeroBlockDoesNotWait", s.testReadZeroBlockDoesNotWait},
		{"ReadWakesOnPublish", s.testReadWakesOnPublish},
		{"ReadReturnsOnCancel", s.testReadReturnsOnCancel},
		{"AckRemovesFromPending", s.testAckRemovesFromPending},
		{"AckUnknownIDs", s.testAckUnknownIDs},
		{"ReclaimAfterMinIdleNotBefore", s.testReclaimAfterMinIdleNotBefore},
		{"ReclaimCount", s.testReclaimCount},
		{"ReclaimUnknownGroup", s.testReclaimUnknownGroup},
		{"TrimRemovesAcknowledged", s.testTrimRemovesAcknowledged},
		{"TrimKeepsUnread", s.testTrimKeepsUnread},
		{"TrimKeepsPending", s.testTrimKeepsPending},
		{"TrimWithoutGroups", s.testTrimWithoutGroups},
		{"TrimMissingStream", s.testTrimMissingStream},
		{"ConcurrentPublishersAndConsumers", s.testConcurrent},
		{"ConcurrentPublishesKeepEachCallsOrder", s.testConcurrentPublishOrder},
		{"MalformedEntryDoesNotBlockItsPartition", s.testMalformedEntry},
		{"QueuesAreIsolated", s.testQueuesAreIsolated},
		{"Ping", s.testPing},
	}
	// What only some adapters can do runs where the adapter says it can:
	// a queue that lives in its process cannot be restarted, and a broker
	// that never loses an entry's data cannot be made to.
	if features.DropEntryData != nil {
		tests = append(tests, struct {
			name string
			fn   func(t *testing.T)
		}{"ReclaimSkipsTrimmedEntries", s.testReclaimSkipsTrimmedEntries})
	}
	if features.Restart != nil {
		tests = append(tests, struct {
			name string
			fn   func(t *testing.T)
		}{"NothingLostAcrossRestart", s.testRestart})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t)
		})
	}
}

type suite struct {
	newQueue func(t *testing.T) ports.Queue
	f        Features
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 2*waitFor)
	t.Cleanup(cancel)
	return ctx
}

// Entries returns entries of bodies, without a key: the entries of one
// partition, which keep their order.
func Entries(bodies ...string) []ports.Entry {
	out := make([]ports.Entry, len(bodies))
	for i, b := range bodies {
		out[i] = ports.Entry{Body: b}
	}
	return out
}

func bodiesN(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + strconv.Itoa(i)
	}
	return out
}

func bodiesOf(msgs []ports.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.Body
	}
	return out
}

func idsOf(msgs []ports.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
}

// readAll reads until n entries came, failing with what it got after the
// deadline.
func readAll(t *testing.T, q ports.Queue, stream, group, consumer string, n int) []ports.Message {
	t.Helper()
	ctx := ctxFor(t)
	var got []ports.Message
	deadline := time.Now().Add(waitFor)
	for len(got) < n {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %d entries of %s as %s/%s; got %d: %v", waitFor, n, stream, group, consumer, len(got), bodiesOf(got))
		}
		msgs, err := q.Read(ctx, stream, group, consumer, n-len(got), 200*time.Millisecond)
		require.NoError(t, err)
		got = append(got, msgs...)
	}
	return got
}

// idleFor makes every entry read so far old enough for Reclaim, and returns
// the minIdle to pass. In real time it returns RealMinIdle and callers poll.
func (s suite) idleFor(t *testing.T, q ports.Queue) time.Duration {
	if s.f.RedeliverAfter > 0 {
		return s.f.RedeliverAfter
	}
	if s.f.AdvanceIdle != nil {
		s.f.AdvanceIdle(t, q, ClockMinIdle+time.Second)
		return ClockMinIdle
	}
	return RealMinIdle
}

// reclaimUntil calls Reclaim until every id in want has been returned,
// failing after the deadline with what was waited for. It returns every
// message reclaimed on the way.
func (s suite) reclaimUntil(t *testing.T, q ports.Queue, group, consumer string, minIdle time.Duration, count int, want []string) []ports.Message {
	t.Helper()
	ctx := ctxFor(t)
	var got []ports.Message
	deadline := time.Now().Add(waitFor)
	for {
		msgs, err := q.Reclaim(ctx, streamName, group, consumer, minIdle, count)
		require.NoError(t, err)
		require.LessOrEqual(t, len(msgs), count, "Reclaim returned more than count")
		if s.f.RedeliverAfter > 0 {
			require.Empty(t, msgs, "Reclaim returned entries the queue redelivers itself")
			msgs, err = q.Read(ctx, streamName, group, consumer, count, 200*time.Millisecond)
			require.NoError(t, err)
			require.LessOrEqual(t, len(msgs), count, "Read returned more than count")
		}
		got = append(got, msgs...)
		ids := idsOf(got)
		missing := slices.DeleteFunc(slices.Clone(want), func(id string) bool { return slices.Contains(ids, id) })
		if len(missing) == 0 {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for entries %v to be reclaimable after %s idle; still missing %v", waitFor, want, minIdle, missing)
		}
		if s.f.AdvanceIdle != nil && len(msgs) == 0 {
			t.Fatalf("entries %v were not reclaimed although the clock moved past minIdle", missing)
		}
	}
}

func (s suite) testPublishReadOrder(t *testing.T) {
	q, ctx := s.newQueue(t), ctxFor(t)
	want := bodiesN("order-", 12)
	require.NoError(t, q.Publish(ctx, streamName, Entries(want[:5]...)...))
	require.NoError(t, q.Publish(ctx, streamName, Entries(want[5])...))
	require.NoError(t, q.Publish(ctx, streamName, Entries(want[6:]...)...))
	require.NoError(t, q.Publish(ctx, streamName), "publishing nothing is a no-op")

	got := readAll(t, q, streamName, "g", "c1", len(want))
	assert.Equal(t, want, bodiesOf(got), "one group reads entries in publish order")
	ids := idsOf(got)
	for _, id := range ids {
		assert.NotEmpty(t, id, "the queue assigns an id")
	}
	assert.Len(t, compactSet(ids), len(ids), "ids are unique: %v", ids)
}

// testKeys publishes entries of several keys, interleaved, and reads them
// back: each with its key, read and reclaimed, and each key's entries in
// the order they were published.
func (s suite) testKeys(t *testing.T) {
	q, ctx := s.newQueue(t), ctxFor(t)
	var published []ports.Entry
	for i := range 40 {
		published = append(published, ports.Entry{Key: "sub_" + strconv.Itoa(i%7), Body: "keyed-" + strconv.Itoa(i)})
	}
	require.NoError(t, q.Publish(ctx, streamName, published[:25]...))
	require.NoError(t, q.Publish(ctx, streamName, published[25:]...))

	got := readAll(t, q, streamName, "g", "c1", len(published))
	keyOf := map[string]string{}
	for _, e := range published {
		keyOf[e.Body] = e.Key
	}
	byKey := map[string][]string{}
	for _, m := range got {
		assert.Equal(t, keyOf[m.Body], m.Key, "entry %s comes back with its key", m.Body)
		byKey[m.Key] = append(byKey[m.Key], m.Body)
	}
	for key, bodies := range byKey {
		var want []string
		for _, e := range published {
			if e.Key == key {
				want = append(want, e.Body)
			}
		}
		assert.Equal(t, want, bodies, "the entries of key %s in publish order", key)
	}

	reclaimed := s.reclaimUntil(t, q, "g", "c2", s.idleFor(t, q), len(got), idsOf(got))
	for _, m := range reclaimed {
		assert.Equal(t, keyOf[m.Body], m.Key, "reclaimed entry %s keeps its key", m.Body)
	}
}

func (s suite) testReadCount(t *testing.T) {
	q, ctx := s.newQueue(t), ctxFor(t)
	want := bodiesN("count-", 10)
	require.NoError(t, q.Publish(ctx, streamName, Entries(want...)...))

	first, err := q.Read(ctx, streamName, "g", "c1", 3, time.Second)
	require.NoError(t, err)
	assert.Equal(t, want[:3], bodiesOf(first), "Read returns at most count entries, oldest first")
	rest := readAll(t, q, streamName, "g", "c1", 7)
	assert.Equal(t, want[3:], bodiesOf(rest))
}

// keyedEntries returns n entries, each of a key of its own, so they spread
// over every partition a queue has.
func keyedEntries(prefix string, n int) []ports.Entry {
	out := make([]ports.Entry, n)
	for i := range out {
		out[i] = ports.Entry{Key: prefix + "key_" + strconv.Itoa(i), Body: prefix + strconv.Itoa(i)}
	}
	return out
}

// testReadCountAcrossKeys checks that count bounds a Read whatever
// partitions the entries are in, and that reads of every size take each
// entry once.
func (s suite) testReadCountAcrossKeys(t *testing.T) {
	q, ctx := s.newQueue(t), ctxFor(t)
	published := keyedEntries("spread-", 60)
	require.NoError(t, q.Publish(ctx, streamName, published...))
	var got []string
	for _, count := range []int{1, 2, 3, 5, 7, 11, 13, 17} {
		msgs, err := q.Read(ctx, streamName, "g", "c1", count, time.Second)
		require.NoError(t, err)
		require.LessOrEqual(t, len(msgs), count, "Read returned more than count")
		assert.NotEmpty(t, msgs, "entries are waiting: a Read of %d returns some", count)
		got = append(got, bodiesOf(msgs)...)
	}
	got = append(got, bodiesOf(readAll(t, q, streamName, "g", "c1", len(published)-len(got)))...)
	want := make([]string, len(published))
	for i, e := range published {
		want[i] = e.Body
	}
	assert.ElementsMatch(t, want, got, "every entry read once")
}

// testReadWokenReturnsAtMostCount blocks a Read of 2 and then publishes
// entries of many keys at once: the woken Read returns no more than 2, and
// the rest is left for the next Reads.
func (s suite) testReadWokenReturnsAtMostCount(t *testing.T) {
	q, ctx := s.newQueue(t), ctxFor(t)
	_, err := q.Read(ctx, streamName, "g", "c", 1, 0) // create the group
	require.NoError(t, err)
	type result struct {
		msgs []ports.Message
		err  error
	}
	done := make(chan result, 1)
	go func() {
		msgs, err := q.Read(ctx, streamName, "g", "c", 2, 30*time.Second)
		done <- result{msgs, err}
	}()
	published := keyedEntries("woken-", 40)
	require.NoError(t, q.Publish(ctx, streamName, published...))
	var first []ports.Message
	select {
	case r := <-done:
		require.NoError(t, r.err)
		first = r.msgs
	case <-time.After(waitFor):
		t.Fatalf("waited %s for a blocked Read to return", waitFor)
	}
	require.NotEmpty(t, first)
	require.LessOrEqual(t, len(first), 2, "a woken Read returned more than count")
	rest := readAll(t, q, streamName, "g", "c", len(published)-len(first))
	assert.Len(t, compactSet(append(bodiesOf(first), bodiesOf(rest)...)), len(published), "every entry read once")
}

func (s suite) testReadBeforePublish(t *testing.T) {
	q, ctx := s.newQueue(t), ctxFor(t)
	// The first Read creates the group on a stream that does not exist yet.
	msgs, err := q.Read(ctx, streamName, "g", "c1", 10, 0)
	require.NoError(t, err)
	assert.Empty(t, msgs)

	require.NoError(t, q.Publish(ctx, streamName, Entries("after")...))
	got := readAll(t, q, streamName, "g", "c1", 1)
	assert.Equal(t, []string{"after"}, bodiesOf(got))

	// A group created later still reads from the stream's start.
	late := readAll(t, q, streamName, "late", "c1", 1)
	assert.Equal(t, []string{"after"}, bodiesOf(late))
}

func (s suite) testOneGroupSeesEachEntryOnce(t *testing.T) {
	q, ctx := s.newQueue(t), ctxFor(t)
	want := bodiesN("once-", 10)
	require.NoError(t, q.Publish(ctx, streamName, Entries(want...)...))

	a, err := q.Read(ctx, streamName, "g", "a", 4, time.Second)
	require.NoError(t, err)
	b := readAll(t, q, streamName, "g", "b", 10-len(a))
	assert.ElementsMatch(t, want, append(bodiesOf(a), bodiesOf(b)...), "consumers of one group split the entries")

	for _, c := range []string{"a", "b", "c"} {
		more, err := q.Read(ctx, streamName, "g", c, 10, 0)
		require.NoError(t, err)
		assert.Empty(t, more, "consumer %s must not see an entry already delivered to the group", c)
	}
}

func (s suite) testGroupsAreIndependent(t *testing.T) {
	q, ctx := s.newQueue(t), ctxFor(t)
	want := bodiesN("fan-", 10)
	require.NoError(t, q.Publish(ctx, streamName, Entries(want...)...))

	g1 := readAll(t, q, streamName, "g1", "c", 10)
	g2 := readAll(t, q, streamName, "g2", "c", 10)
	assert.Equal(t, want, bodiesOf(g1))
	assert.Equal(t, want, bodiesOf(g2), "every group sees every entry")
	assert.Equal(t, idsOf(g1), idsOf(g2), "an entry has one id whichever group reads it")
}

func (s suite) testStreamsAreIndependent(t *testing.T) {
	q, ctx := s.newQueue(t), ctxFor(t)
	require.NoError(t, q.Publish(ctx, streamName, Entries("on-contract")...))
	require.NoError(t, q.Publish(ctx, streamName+"-other", Entries("on-other")...))

	got := readAll(t, q, streamName, "g", "c", 1)
	assert.Equal(t, []string{"on-contract"}, bodiesOf(got))
	more, err := q.Read(ctx, streamName, "g", "c", 10, 0)
	require.NoError(t, err)
	assert.Empty(t, more)
	other := readAll(t, q, streamName+"-other", "g", "c", 1)
	assert.Equal(t, []string{"on-other"}, bodiesOf(other))
}

func (s suite) testReadBlocksThenReturnsEmpty(t *testing.T) {
	q, ctx := s.newQueue(t), ctxFor(t)
	const block = 150 * time.Millisecond
	start := time.Now()
	msgs, err := q.Read(ctx, streamName, "g", "c", 10, block)
	elapsed := time.Since(start)
	require.NoError(t, err)
	assert.NotNil(t, msgs, "an empty read returns an empty slice")
	assert.Empty(t, msgs)
	assert.GreaterOrEqual(t, elapsed, block-10*time.Millisecond, "Read must wait for the block duration")
	assert.Less(t, elapsed, block+3*time.Second, "Read must not wait much longer than block")
}

func (s suite) testReadZeroBlockDoesNotWait(t *testing.T) {
	q, ctx := s.newQueue(t), ctxFor(t)
	for range 2 { // the second time the group exists
		start := time.Now()
		msgs, err := q.Read(ctx, streamName, "g", "c", 10, 0)
		require.NoError(t, err)
		assert.Empty(t, msgs)
		assert.Less(t, time.Since(start), 2*time.Second, "block 0 must not wait (Redis's BLOCK 0 waits forever)")
	}
}

func (s suite) testReadWakesOnPublish(t *testing.T) {
	q, ctx := s.newQueue(t), ctxFor(t)
	// Create the group first so the reader is blocked on new entries only.
	_, err := q.Read(ctx, streamName, "g", "c", 1, 0)
	require.NoError(t, err)

	type result struct {
		msgs []ports.Message
		err  error
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		msgs, err := q.Read(ctx, streamName, "g", "c", 10, 30*time.Second)
		done <- result{msgs, err}
	}()
	// Publishing before the reader blocks is fine too: either way it must
	// return the entry long before its block ends.
	require.NoError(t, q.Publish(ctx, streamName, Entries("wake")...))
	select {
	case r := <-done:
		require.NoError(t, r.err)
		assert.Equal(t, []string{"wake"}, bodiesOf(r.msgs))
		assert.Less(t, time.Since(start), waitFor)
	case <-time.After(waitFor):
		t.Fatalf("waited %s for a blocked Read to return a published entry", waitFor)
	}
}

func (s suite) testReadReturnsOnCancel(t *testing.T) {
	q := s.newQueue(t)
	ctx, cancel := context.WithCancel(ctxFor(t))
	_, err := q.Read(ctx, streamName, "g", "c", 1, 0) // create the group
	require.NoError(t, err)

	start := time.Now()
	timer := time.AfterFunc(50*time.Millisecond, cancel)
	defer timer.Stop()
	msgs, err := q.Read(ctx, streamName, "g", "c", 10, 30*time.Second)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Empty(t, msgs)
	assert.Less(t, time.Since(start), 2*time.Second, "Read must return promptly when ctx ends")

	_, err = q.Read(ctx, streamName, "g", "c", 10, 30*time.Second)
	assert.ErrorIs(t, err, context.Canceled, "Read with an ended ctx fails at once")
}

func (s suite) testAckRemovesFromPending(t *testing.T) {
	q, ctx := s.newQueue(t), ctxFor(t)
	require.NoError(t, q.Publish(ctx, streamName, Entries(bodiesN("ack-", 3)...)...))
	got := readAll(t, q, streamName, "g", "dead", 3)
	require.NoError(t, q.Ack(ctx, streamName, "g", got[0].ID, got[2].ID))

	minIdle := s.idleFor(t, q)
	reclaimed := s.reclaimUntil(t, q, "g", "rescuer", minIdle, 10, []string{got[1].ID})
	// One more pass: acknowledged entries must never come back.
	if s.f.AdvanceIdle == nil {
		more, err := q.Reclaim(ctx, streamName, "g", "rescuer2", minIdle, 10)
		require.NoError(t, err)
		reclaimed = append(reclaimed, more...)
	}
	for _, m := range reclaimed {
		assert.NotContains(t, []string{got[0].ID, got[2].ID}, m.ID, "an acknowledged entry was reclaimed")
	}
	assert.Equal(t, "ack-1", reclaimed[0].Body, "Reclaim returns the entry's body")
}

func (s suite) testAckUnknownIDs(t *testing.T) {
	q, ctx := s.newQueue(t), ctxFor(t)
	require.NoError(t, q.Ack(ctx, streamName, "g"), "no ids is a no-op")
	require.NoError(t, q.Ack(ctx, "never-created", "g", "1-1"), "unknown stream")

	require.NoError(t, q.Publish(ctx, streamName, Entries("x")...))
	got := readAll(t, q, streamName, "g", "c", 1)
	require.NoError(t, q.Ack(ctx, streamName, "other-group", got[0].ID), "unknown group")
	require.NoError(t, q.Ack(ctx, streamName, "g", "1-1", "9999999999999-0"), "ids that were never pending")
	require.NoError(t, q.Ack(ctx, streamName, "g", got[0].ID))
	require.NoError(t, q.Ack(ctx, streamName, "g", got[0].ID), "acknowledging twice")
}

func (s suite) testReclaimAfterMinIdleNotBefore(t *testing.T) {
	q, ctx := s.newQueue(t), ctxFor(t)
	require.NoError(t, q.Publish(ctx, streamName, Entries(bodiesN("idle-", 3)...)...))
	got := readAll(t, q, streamName, "g", "dead", 3)
	want := idsOf(got)

	// Not before minIdle.
	notYet := time.Minute
	if s.f.AdvanceIdle != nil {
		notYet = ClockMinIdle
		s.f.AdvanceIdle(t, q, ClockMinIdle-time.Minute)
	}
	early, err := q.Reclaim(ctx, streamName, "g", "rescuer", notYet, 10)
	require.NoError(t, err)
	assert.Empty(t, early, "entries were reclaimed before they were idle for minIdle")
	s.assertNotRedelivered(t, q, "g", "rescuer", "entries were redelivered before they were idle for the visibility timeout")

	// After minIdle, by another consumer, with their bodies.
	minIdle := s.idleFor(t, q)
	reclaimed := s.reclaimUntil(t, q, "g", "rescuer", minIdle, 10, want)
	assert.ElementsMatch(t, bodiesN("idle-", 3), compactSet(bodiesOf(reclaimed)))

	// A reclaimed entry is pending again, now for the rescuer: not
	// reclaimable until it idles again, and gone once acknowledged.
	again, err := q.Reclaim(ctx, streamName, "g", "third", notYet, 10)
	require.NoError(t, err)
	assert.Empty(t, again, "a just-reclaimed entry is not idle")
	s.assertNotRedelivered(t, q, "g", "third", "a just-redelivered entry is not idle")
	require.NoError(t, q.Ack(ctx, streamName, "g", want...))
	if s.f.AdvanceIdle != nil {
		s.f.AdvanceIdle(t, q, 2*ClockMinIdle)
	}
	after, err := q.Reclaim(ctx, streamName, "g", "third", minIdle, 10)
	require.NoError(t, err)
	assert.Empty(t, after, "an acknowledged entry was reclaimed")

	// Reading never hands out a pending entry again.
	fresh, err := q.Read(ctx, streamName, "g", "other", 10, 0)
	require.NoError(t, err)
	assert.Empty(t, fresh)
}

// assertNotRedelivered checks, for a queue that redelivers by itself, that
// a Read right away hands out none of the entries just read: they have not
// been idle for RedeliverAfter yet.
func (s suite) assertNotRedelivered(t *testing.T, q ports.Queue, group, consumer, msg string) {
	t.Helper()
	if s.f.RedeliverAfter <= 0 {
		return
	}
	msgs, err := q.Read(ctxFor(t), streamName, group, consumer, 10, 0)
	require.NoError(t, err)
	assert.Empty(t, bodiesOf(msgs), msg)
}

func (s suite) testReclaimCount(t *testing.T) {
	q, ctx := s.newQueue(t), ctxFor(t)
	require.NoError(t, q.Publish(ctx, streamName, Entries(bodiesN("rc-", 5)...)...))
	got := readAll(t, q, streamName, "g", "dead", 5)

	minIdle := s.idleFor(t, q)
	reclaimed := s.reclaimUntil(t, q, "g", "rescuer", minIdle, 2, idsOf(got))
	assert.ElementsMatch(t, idsOf(got), compactSet(idsOf(reclaimed)))
}

func (s suite) testReclaimUnknownGroup(t *testing.T) {
	q, ctx := s.newQueue(t), ctxFor(t)
	msgs, err := q.Reclaim(ctx, "never-created", "g", "c", 0, 10)
	require.NoError(t, err)
	assert.Empty(t, msgs)

	require.NoError(t, q.Publish(ctx, streamName, Entries("x")...))
	msgs, err = q.Reclaim(ctx, streamName, "no-such-group", "c", 0, 10)
	require.NoError(t, err)
	assert.Empty(t, msgs)
}

func (s suite) testReclaimSkipsTrimmedEntries(t *testing.T) {
	q, ctx := s.newQueue(t), ctxFor(t)
	require.NoError(t, q.Publish(ctx, streamName, Entries(bodiesN("trim-", 3)...)...))
	got := readAll(t, q, streamName, "g", "dead", 3)
	s.f.DropEntryData(t, q, streamName, got[1].ID)

	minIdle := s.idleFor(t, q)
	reclaimed := s.reclaimUntil(t, q, "g", "rescuer", minIdle, 10, []string{got[0].ID, got[2].ID})
	assert.NotContains(t, idsOf(reclaimed), got[1].ID, "an entry whose data was trimmed was returned")

	// It was acknowledged: it never comes back, however idle.
	require.NoError(t, q.Ack(ctx, streamName, "g", got[0].ID, got[2].ID))
	if s.f.AdvanceIdle != nil {
		s.f.AdvanceIdle(t, q, 2*ClockMinIdle)
	}
	after, err := q.Reclaim(ctx, streamName, "g", "third", minIdle, 10)
	require.NoError(t, err)
	assert.Empty(t, after)
}

// remaining returns the bodies left in the stream, read through a new group
// (which starts at the stream's start, so after the trimmed entries) and
// acknowledged, so that the observer never holds a later Trim back.
func remaining(t *testing.T, q ports.Queue, observer string) []string {
	t.Helper()
	ctx := ctxFor(t)
	out := []string{}
	for {
		msgs, err := q.Read(ctx, streamName, observer, "observer", 100, 0)
		require.NoError(t, err)
		if len(msgs) == 0 {
			return out
		}
		require.NoError(t, q.Ack(ctx, streamName, observer, idsOf(msgs)...))
		out = append(out, bodiesOf(msgs)...)
	}
}

// assertTrimmedTo checks that the stream holds exactly want after Trim, or,
// for an approximate Trim, want preceded by entries it chose to keep.
func (s suite) assertTrimmedTo(t *testing.T, q ports.Queue, observer string, want []string, msg string) {
	t.Helper()
	got := remaining(t, q, observer)
	if !s.f.TrimApproximate {
		assert.Equal(t, want, got, msg)
		return
	}
	if assert.GreaterOrEqual(t, len(got), len(want), "%s: Trim removed an entry it had to keep", msg) {
		assert.Equal(t, want, got[len(got)-len(want):], "%s: Trim removed an entry it had to keep", msg)
	}
}

func (s suite) testTrimRemovesAcknowledged(t *testing.T) {
	q, ctx := s.newQueue(t), ctxFor(t)
	require.NoError(t, q.Publish(ctx, streamName, Entries(bodiesN("done-", 5)...)...))
	for _, g := range []string{"g1", "g2"} {
		got := readAll(t, q, streamName, g, "c", 5)
		require.NoError(t, q.Ack(ctx, streamName, g, idsOf(got)...))
	}
	require.NoError(t, q.Trim(ctx, streamName))
	s.assertTrimmedTo(t, q, "observer1", []string{}, "entries every group acknowledged must be removed")

	// The trimmed stream and its groups carry on; ids keep growing.
	require.NoError(t, q.Publish(ctx, streamName, Entries("next")...))
	got := readAll(t, q, streamName, "g1", "c", 1)
	assert.Equal(t, []string{"next"}, bodiesOf(got))
	require.NoError(t, q.Ack(ctx, streamName, "g1", got[0].ID))
	require.NoError(t, q.Trim(ctx, streamName))
	got = readAll(t, q, streamName, "g2", "c", 1)
	assert.Equal(t, []string{"next"}, bodiesOf(got), "an entry g2 had not read yet was trimmed")
}

func (s suite) testTrimKeepsUnread(t *testing.T) {
	q, ctx := s.newQueue(t), ctxFor(t)
	// A group that has read nothing yet holds the whole stream.
	msgs, err := q.Read(ctx, streamName, "lazy", "c", 10, 0)
	require.NoError(t, err)
	require.Empty(t, msgs)
	all := bodiesN("unread-", 5)
	require.NoError(t, q.Publish(ctx, streamName, Entries(all...)...))
	fast := readAll(t, q, streamName, "fast", "c", 5)
	require.NoError(t, q.Ack(ctx, streamName, "fast", idsOf(fast)...))

	require.NoError(t, q.Trim(ctx, streamName))
	s.assertTrimmedTo(t, q, "observer1", all, "a group that has read nothing must keep every entry")

	lazy := readAll(t, q, streamName, "lazy", "c", 2)
	assert.Equal(t, all[:2], bodiesOf(lazy))
	require.NoError(t, q.Ack(ctx, streamName, "lazy", idsOf(lazy)...))
	require.NoError(t, q.Trim(ctx, streamName))
	s.assertTrimmedTo(t, q, "observer2", all[2:], "entries the lazy group has not read must be kept")
	rest := readAll(t, q, streamName, "lazy", "c", 3)
	assert.Equal(t, all[2:], bodiesOf(rest))
}

func (s suite) testTrimKeepsPending(t *testing.T) {
	q, ctx := s.newQueue(t), ctxFor(t)
	all := bodiesN("pending-", 5)
	require.NoError(t, q.Publish(ctx, streamName, Entries(all...)...))
	dead := readAll(t, q, streamName, "g1", "dead", 5)
	require.NoError(t, q.Ack(ctx, streamName, "g1", dead[0].ID, dead[2].ID, dead[3].ID, dead[4].ID))
	other := readAll(t, q, streamName, "g2", "c", 5)
	require.NoError(t, q.Ack(ctx, streamName, "g2", idsOf(other)...))

	// Trimming removes the oldest entries only: those after the pending one
	// stay too, although every group acknowledged them.
	require.NoError(t, q.Trim(ctx, streamName))
	s.assertTrimmedTo(t, q, "observer1", all[1:], "an entry pending in g1 must be kept")

	minIdle := s.idleFor(t, q)
	reclaimed := s.reclaimUntil(t, q, "g1", "rescuer", minIdle, 10, []string{dead[1].ID})
	back := compactSet(bodiesOf(reclaimed))
	if s.f.TrimMayRedeliver {
		back = slices.DeleteFunc(back, func(b string) bool { return b != all[1] && slices.Contains(all, b) })
	}
	assert.Equal(t, []string{all[1]}, back, "the pending entry keeps its body")

	require.NoError(t, q.Ack(ctx, streamName, "g1", idsOf(reclaimed)...))
	require.NoError(t, q.Trim(ctx, streamName))
	s.assertTrimmedTo(t, q, "observer2", []string{}, "once acknowledged, everything can go")
}

func (s suite) testTrimWithoutGroups(t *testing.T) {
	q, ctx := s.newQueue(t), ctxFor(t)
	all := bodiesN("nogroup-", 3)
	require.NoError(t, q.Publish(ctx, streamName, Entries(all...)...))
	require.NoError(t, q.Trim(ctx, streamName))
	got := readAll(t, q, streamName, "g", "c", 3)
	assert.Equal(t, all, bodiesOf(got), "a stream without groups must be left alone")
}

func (s suite) testTrimMissingStream(t *testing.T) {
	q, ctx := s.newQueue(t), ctxFor(t)
	require.NoError(t, q.Trim(ctx, "never-created"))
	// A stream that exists only because a group was created on it.
	msgs, err := q.Read(ctx, streamName, "g", "c", 10, 0)
	require.NoError(t, err)
	require.Empty(t, msgs)
	require.NoError(t, q.Trim(ctx, streamName))
	require.NoError(t, q.Publish(ctx, streamName, Entries("after")...))
	got := readAll(t, q, streamName, "g", "c", 1)
	assert.Equal(t, []string{"after"}, bodiesOf(got))
}

func (s suite) testConcurrent(t *testing.T) {
	q, ctx := s.newQueue(t), ctxFor(t)
	const publishers, perPublisher, consumers = 4, 250, 3
	const total = publishers * perPublisher

	// Create the group first so every consumer starts from the same place.
	_, err := q.Read(ctx, streamName, "g", "c0", 1, 0)
	require.NoError(t, err)

	var (
		mu   sync.Mutex
		seen = make(map[string]int, total)
		all  = make(chan struct{})
		once sync.Once
	)
	var wg sync.WaitGroup
	errs := make(chan error, publishers+consumers+1)
	for p := range publishers {
		wg.Go(func() {
			for i := 0; i < perPublisher; i += 25 {
				batch := make([]string, 0, 25)
				for j := i; j < min(i+25, perPublisher); j++ {
					batch = append(batch, fmt.Sprintf("p%d-%d", p, j))
				}
				if err := q.Publish(ctx, streamName, Entries(batch...)...); err != nil {
					errs <- fmt.Errorf("publisher %d: %w", p, err)
					return
				}
			}
		})
	}
	for c := range consumers {
		wg.Go(func() {
			name := fmt.Sprintf("c%d", c)
			for {
				select {
				case <-all:
					return
				default:
				}
				msgs, err := q.Read(ctx, streamName, "g", name, 50, 100*time.Millisecond)
				if err != nil {
					errs <- fmt.Errorf("consumer %s read: %w", name, err)
					return
				}
				if len(msgs) == 0 {
					continue
				}
				if err := q.Ack(ctx, streamName, "g", idsOf(msgs)...); err != nil {
					errs <- fmt.Errorf("consumer %s ack: %w", name, err)
					return
				}
				mu.Lock()
				for _, m := range msgs {
					seen[m.Body]++
				}
				if len(seen) >= total {
					once.Do(func() { close(all) })
				}
				mu.Unlock()
			}
		})
	}

	// Trimming all along must never cost the group an entry it has not read.
	wg.Go(func() {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-all:
				return
			case <-tick.C:
			}
			if err := q.Trim(ctx, streamName); err != nil {
				errs <- fmt.Errorf("trim: %w", err)
				return
			}
		}
	})

	stop := func() { once.Do(func() { close(all) }) }
	select {
	case <-all:
	case err := <-errs:
		stop()
		wg.Wait()
		t.Fatal(err)
	case <-time.After(2 * waitFor):
		stop()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("waited %s for %d published entries to be read and acknowledged; got %d", 2*waitFor, total, len(seen))
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	mu.Lock()
	defer mu.Unlock()
	for p := range publishers {
		for i := range perPublisher {
			body := fmt.Sprintf("p%d-%d", p, i)
			assert.Equal(t, 1, seen[body], "entry %s must be read exactly once by the group", body)
		}
	}
	// Nobody crashed, so nothing is left to reclaim.
	if s.f.AdvanceIdle != nil {
		s.f.AdvanceIdle(t, q, 2*ClockMinIdle)
	}
	left, err := q.Reclaim(ctx, streamName, "g", "rescuer", 0, 100)
	require.NoError(t, err)
	assert.Empty(t, left, "every entry was acknowledged")
}

// testConcurrentPublishOrder publishes from many goroutines at once, as
// the api role does (a queue may gather concurrent calls into one round
// trip): every body is appended once, each call's bodies in order, and the
// calls of one publisher in the order it made them.
func (s suite) testConcurrentPublishOrder(t *testing.T) {
	q, ctx := s.newQueue(t), ctxFor(t)
	const publishers, calls = 32, 10
	var wg sync.WaitGroup
	for p := range publishers {
		wg.Go(func() {
			for c := range calls {
				// 1 to 3 bodies per call.
				bodies := make([]string, 1+(p+c)%3)
				for i := range bodies {
					bodies[i] = fmt.Sprintf("p%d-c%d-%d", p, c, i)
				}
				if !assert.NoError(t, q.Publish(ctx, streamName, Entries(bodies...)...), "publisher %d call %d", p, c) {
					return
				}
			}
		})
	}
	wg.Wait()
	var want []string
	for p := range publishers {
		for c := range calls {
			for i := range 1 + (p+c)%3 {
				want = append(want, fmt.Sprintf("p%d-c%d-%d", p, c, i))
			}
		}
	}
	got := bodiesOf(readAll(t, q, streamName, "g", "c1", len(want)))
	assert.ElementsMatch(t, want, got, "every body is appended exactly once")
	// Within one publisher, everything is in publish order.
	last := make(map[string]int)
	for i, body := range got {
		publisher := body[:strings.Index(body, "-")]
		if prev, ok := last[publisher]; ok {
			assert.Less(t, slices.Index(want, got[prev]), slices.Index(want, body),
				"%s was published after %s, so it must come after it", body, got[prev])
		}
		last[publisher] = i
	}
}

// testMalformedEntry puts entries no consumer can make sense of (empty,
// binary, huge) between good ones of the same key: each is handed out
// as it was published, to be acknowledged and dropped by its consumer
// (application.Consumer counts it), and the key's later entries follow.
func (s suite) testMalformedEntry(t *testing.T) {
	q, ctx := s.newQueue(t), ctxFor(t)
	bodies := []string{"good-1", "", "\x00\xff not text {", strings.Repeat("x", 64<<10), "good-2"}
	entries := make([]ports.Entry, len(bodies))
	for i, b := range bodies {
		entries[i] = ports.Entry{Key: "sub_1", Body: b}
	}
	require.NoError(t, q.Publish(ctx, streamName, entries...))
	got := readAll(t, q, streamName, "g", "c", len(bodies))
	assert.Equal(t, bodies, bodiesOf(got), "every entry of the key, odd ones included, in order")
	require.NoError(t, q.Ack(ctx, streamName, "g", idsOf(got)...))
	require.NoError(t, q.Publish(ctx, streamName, ports.Entry{Key: "sub_1", Body: "good-3"}))
	assert.Equal(t, []string{"good-3"}, bodiesOf(readAll(t, q, streamName, "g", "c", 1)), "the partition goes on")
}

// testQueuesAreIsolated uses two queues of newQueue, which share their
// broker (a prefix each), as two deployments would: neither sees the
// other's entries, and one's acknowledgements and trimming leave the other
// alone.
func (s suite) testQueuesAreIsolated(t *testing.T) {
	a, b, ctx := s.newQueue(t), s.newQueue(t), ctxFor(t)
	require.NoError(t, a.Publish(ctx, streamName, Entries("a-0", "a-1")...))
	require.NoError(t, b.Publish(ctx, streamName, Entries("b-0")...))

	gotA := readAll(t, a, streamName, "g", "c", 2)
	assert.Equal(t, []string{"a-0", "a-1"}, bodiesOf(gotA))
	gotB := readAll(t, b, streamName, "g", "c", 1)
	assert.Equal(t, []string{"b-0"}, bodiesOf(gotB))
	for name, q := range map[string]ports.Queue{"a": a, "b": b} {
		more, err := q.Read(ctx, streamName, "g", "c", 10, 0)
		require.NoError(t, err)
		assert.Empty(t, bodiesOf(more), "queue %s read another queue's entries", name)
	}

	require.NoError(t, a.Ack(ctx, streamName, "g", idsOf(gotA)...))
	require.NoError(t, a.Trim(ctx, streamName))
	late := readAll(t, b, streamName, "late", "c", 1)
	assert.Equal(t, []string{"b-0"}, bodiesOf(late), "trimming one queue removed another's entry")
}

// testRestart reads entries of several keys, acknowledges some, and
// restarts the queue's process: at least once, every entry not
// acknowledged comes back to the process in its place, and the stream
// carries on.
func (s suite) testRestart(t *testing.T) {
	q, ctx := s.newQueue(t), ctxFor(t)
	var entries []ports.Entry
	for i := range 24 {
		entries = append(entries, ports.Entry{Key: "k" + strconv.Itoa(i%4), Body: "restart-" + strconv.Itoa(i)})
	}
	require.NoError(t, q.Publish(ctx, streamName, entries...))
	got := readAll(t, q, streamName, "g", "dies", len(entries))
	var acked []string
	want := map[string]bool{}
	for i, m := range got {
		if i%3 == 0 {
			acked = append(acked, m.ID)
		} else {
			want[m.Body] = true
		}
	}
	require.NoError(t, q.Ack(ctx, streamName, "g", acked...))

	q = s.f.Restart(t, q)
	deadline := time.Now().Add(2 * waitFor)
	for len(want) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("entries %v read but not acknowledged before the restart never came back", slices.Sorted(maps.Keys(want)))
		}
		msgs, err := q.Read(ctx, streamName, "g", "heir", 100, 200*time.Millisecond)
		require.NoError(t, err)
		reclaimed, err := q.Reclaim(ctx, streamName, "g", "heir", s.idleFor(t, q), 100)
		require.NoError(t, err)
		msgs = append(msgs, reclaimed...)
		for _, m := range msgs {
			delete(want, m.Body)
		}
		require.NoError(t, q.Ack(ctx, streamName, "g", idsOf(msgs)...))
	}

	// The stream carries on; an entry acknowledged before the restart may
	// come again (at least once), nothing else.
	require.NoError(t, q.Publish(ctx, streamName, Entries("after")...))
	published := map[string]bool{}
	for _, e := range entries {
		published[e.Body] = true
	}
	for {
		if time.Now().After(deadline) {
			t.Fatalf("an entry published after the restart was never read")
		}
		msgs, err := q.Read(ctx, streamName, "g", "heir", 100, 200*time.Millisecond)
		require.NoError(t, err)
		require.NoError(t, q.Ack(ctx, streamName, "g", idsOf(msgs)...))
		bodies := bodiesOf(msgs)
		for _, b := range bodies {
			assert.True(t, b == "after" || published[b], "read %q, never published", b)
		}
		if slices.Contains(bodies, "after") {
			return
		}
	}
}

func (s suite) testPing(t *testing.T) {
	q, ctx := s.newQueue(t), ctxFor(t)
	require.NoError(t, q.Ping(ctx))
}

// compactSet returns the distinct values of in, in first-seen order.
func compactSet(in []string) []string {
	seen := make(map[string]bool, len(in))
	out := make([]string, 0, len(in))
	for _, v := range in {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}
