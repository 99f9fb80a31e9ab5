-- A fresh delivery is reserved for the worker that reads its creator's
-- queue entry, so that worker attempts it without claiming it.
--
-- A claim is a write and a commit per batch of deliveries, a third of a
-- fresh delivery's transactions (stored, claimed, recorded). Whoever stores
-- a delivery (ingest's inline fan-out, the fan-out stage) appends its
-- queue entry right after, and the queue hands that entry to one worker.
-- So the creator reserves the delivery with the row it inserts anyway:
-- until reserved_until no claim takes it, except one made for the creator's
-- entry (ClaimDeliveries' fresh flag), and while the reservation outlasts
-- an attempt the holder of that entry reads the delivery instead of
-- leasing it. Claiming, recording and releasing clear the reservation;
-- once it has passed, the delivery is claimable and due as before.
--
-- The reservation is a column of its own, not a lease written at insert:
-- reads keep reporting a delivery nobody has claimed as pending, and no
-- index covers it, so claims and records stay heap-only updates.

-- +goose Up
ALTER TABLE deliveries ADD COLUMN reserved_until timestamptz;

-- +goose Down
ALTER TABLE deliveries DROP COLUMN reserved_until;
