package domain

import (
	"math"
	"time"
)

// Linger decides how long a stage that works in batches (a group commit, a
// queue read) waits for company before it goes: the group-commit idea with
// a linger, as Kafka's producer and PostgreSQL's commit_delay use it, made
// to follow the arrival rate so that nobody has to tune it.
//
// A batch costs a fixed price (a round trip, a commit, a wake-up) plus a
// little per item, so every item that joins a batch instead of making its
// own saves that price. Waiting pays only when company is likely: Linger
// estimates the time between arrivals from what it saw, and a batch waits
// only while at least one more item is expected within Max. It then waits
// for the items expected within Max (never more than would fill the
// batch), or Max, whichever comes first. So:
//
//   - idle or sparse traffic (less than one arrival per Max) never waits:
//     the first event after a quiet spell goes at once;
//   - a full batch never waits;
//   - under steady traffic a batch waits about Max and carries what came
//     meanwhile, which turns batches of one into batches of several;
//   - under heavy traffic the batch fills quickly and goes.
//
// A batch that can see its company come (a group commit) also gives up
// once none has come for Patience: callers that all wait in this very
// batch (a closed loop, such as a fixed set of publishers each waiting
// for its answer) bring no more, however high the rate was.
//
// A Linger is not safe for concurrent use: its owner serialises calls.
type Linger struct {
	// Max is the longest a batch waits for company; 0 never waits.
	Max time.Duration
	// Enough is the batch size beyond which a batch does not wait for
	// more: its fixed price is then shared enough that more company
	// would save little; 0 means only a full batch is enough.
	Enough int

	last time.Time
	// gap is the moving average of the time between two arrivals.
	gap time.Duration
	// seen says last and gap hold an arrival.
	seen bool
	// quiet says the last arrival ended a quiet spell (or was the first):
	// the next gap then starts the average over.
	quiet bool
}

// lingerQuiet is the gap that makes a quiet spell: the items that end one
// never wait, however long Max, and the next gap starts the estimate
// over, so that it follows a burst at once.
const lingerQuiet = time.Second

// lingerWeight is the weight of the newest gap in the moving average: a
// quarter, so the estimate follows a change of rate within a dozen or so
// arrivals and one odd gap moves it only a little.
const lingerWeight = 4

// Arrived records n items arriving together at now (a read that brought n
// entries, one call joining a batch).
func (l *Linger) Arrived(now time.Time, n int) {
	if n <= 0 {
		return
	}
	elapsed := max(now.Sub(l.last), 0)
	if now.After(l.last) {
		l.last = now
	}
	if !l.seen || elapsed >= lingerQuiet {
		// Nothing known yet, or a quiet spell: these items do not wait.
		l.seen, l.quiet, l.gap = true, true, lingerQuiet
		return
	}
	sample := elapsed / time.Duration(n)
	if l.quiet {
		l.quiet, l.gap = false, sample
		return
	}
	l.gap += (sample - l.gap) / lingerWeight
}

// Wait returns how long a batch that holds have items, of at most limit,
// should wait for company, and how many more items it waits for: zero and
// zero when it should go now (see Linger).
func (l *Linger) Wait(have, limit int) (wait time.Duration, more int) {
	if l.Enough > 0 {
		limit = min(limit, l.Enough)
	}
	room := limit - have
	if l.Max <= 0 || room <= 0 || !l.seen || l.quiet {
		return 0, 0
	}
	expected := room
	if l.gap > 0 {
		expected = int(min(float64(l.Max)/float64(l.gap), math.MaxInt32))
	}
	if expected < 1 {
		return 0, 0
	}
	more = min(expected, room)
	if l.gap <= 0 {
		return l.Max, more
	}
	return min(l.Max, time.Duration(more)*l.gap), more
}

// lingerPatience is how many average gaps a lingering batch waits for its
// next arrival: with arrivals at random, four gaps without one happen
// about once in fifty, so a steady stream seldom ends a wait early.
const lingerPatience = 4

// Patience returns how long a lingering batch waits for its next arrival
// before it gives up on company and goes.
func (l *Linger) Patience() time.Duration {
	return lingerPatience * l.gap
}

// The stages that follow an endpoint's answer (the attempt's record, the
// breaker's outcome with the concurrency slot's return, the queue's
// acknowledgement) share one linger, longer than that of the stages
// between an event and its endpoint: the webhook has arrived by then, so
// their wait adds nothing to its latency. At 100 deliveries/s it turns
// batches of one (a commit, a script, an XACK each) into batches of about
// three; AfterAnswerEnough keeps a busy worker from holding slots long
// (a batch waits about 16 ms at 1,000/s, 3 ms at 5,000/s).
const (
	AfterAnswerLinger = 25 * time.Millisecond
	AfterAnswerEnough = 16
)
