-- The scheduler's scan (DueDeliveries) looks for deliveries that should be
-- in the queue and may not be: due ones never enqueued since their last
-- attempt (enqueued_at NULL: a retry that came due, a delivery held behind
-- an earlier one), and ones whose append is older than the requeue window
-- (it may have been lost). deliveries_due_idx covered every undelivered
-- row, so the scan walked every due delivery still waiting in the queue,
-- fetching each from the heap to read its mark, before it found one to
-- re-enqueue: with 100,000 deliveries queued and none lost, ~100,000
-- buffer hits and 50–420 ms for no row, every scan.
--
-- Each case gets an index of its own, and a row is in one of them: the due
-- index keeps the rows without a mark, in due order, and the enqueued index
-- the marked ones, by mark. Every insert, attempt and release writes into
-- one of them, as it wrote into the due index before. What is new is that
-- setting or clearing the mark (the scan's, HoldDelivery's) changes an
-- indexed column: those updates are no longer heap-only. The claim, which
-- writes neither, still is.

-- +goose Up
DROP INDEX deliveries_due_idx;
CREATE INDEX deliveries_due_idx ON deliveries (next_attempt_at, id)
    WHERE enqueued_at IS NULL AND status IN ('pending', 'retrying', 'delivering');
CREATE INDEX deliveries_enqueued_idx ON deliveries (enqueued_at, id)
    WHERE enqueued_at IS NOT NULL AND status IN ('pending', 'retrying', 'delivering');

-- +goose Down
DROP INDEX deliveries_enqueued_idx;
DROP INDEX deliveries_due_idx;
CREATE INDEX deliveries_due_idx ON deliveries (next_attempt_at, id)
    WHERE status IN ('pending', 'retrying', 'delivering');
