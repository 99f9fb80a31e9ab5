-- Ordered delivery (SPEC §3) follows event order, so the ordering index is
-- keyed by event id rather than delivery id.

-- +goose Up

-- A delivery with a non-empty ordering key may be claimed only when no
-- delivery of the same subscription and key for an earlier event (smaller
-- event_id) is pending, retrying or delivering. ClaimDelivery and
-- DueDeliveries ask exactly that (an index range on the three columns, a
-- single probe), and RecordAttempt / ReleaseDelivery find the next in line
-- as the first entry of (subscription_id, ordering_key). Delivery ids do not
-- do: they are made at fan-out, and two fan-out workers can create the
-- deliveries of two events in either order. The index replaces the one on
-- delivery id, so ordered deliveries pay no more than before and unordered
-- ones (ordering_key '', most of them) and terminal ones stay out of it.
DROP INDEX deliveries_ordering_idx;
CREATE INDEX deliveries_ordering_idx ON deliveries (subscription_id, ordering_key, event_id)
    WHERE ordering_key <> '' AND status IN ('pending', 'retrying', 'delivering');

-- +goose Down
DROP INDEX deliveries_ordering_idx;
CREATE INDEX deliveries_ordering_idx ON deliveries (subscription_id, ordering_key, id)
    WHERE ordering_key <> '' AND status IN ('pending', 'retrying', 'delivering');
