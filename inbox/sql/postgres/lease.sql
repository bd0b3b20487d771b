-- Lease times come from the database's clock ($4 / $6 are NULL), so that
-- hosts whose clocks disagree still agree on who holds the lease; tests pass
-- their own time there.

-- name: LeaseAcquire
-- Takes the lease when it is free, expired, already ours, or held by another
-- incarnation of our instance id ($5, the part of the owner before "/"; NULL
-- for an owner without one): a restarted process takes its lease back at
-- once. A new owner gets the next epoch. Setting the epoch (a unique key
-- column) locks the row FOR UPDATE, so a takeover waits for the old owner's
-- running batch to end, and that owner's next batch finds the epoch moved on.
INSERT INTO msgx_lease (name, owner, expires_at, epoch)
VALUES ($1, $2, COALESCE($4::timestamptz, now()) + $3 * interval '1 microsecond', 1)
ON CONFLICT (name) DO UPDATE SET owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at,
    epoch = msgx_lease.epoch + CASE WHEN msgx_lease.owner = EXCLUDED.owner THEN 0 ELSE 1 END
WHERE msgx_lease.owner = EXCLUDED.owner OR msgx_lease.expires_at <= COALESCE($4::timestamptz, now())
    OR left(msgx_lease.owner, length($5::text) + 1) = $5::text || '/'
RETURNING owner, epoch

-- name: LeaseRenew
-- Touches expires_at only: a no-key update, which the pump's FOR KEY SHARE
-- fence never blocks.
UPDATE msgx_lease SET expires_at = COALESCE($4::timestamptz, now()) + $3 * interval '1 microsecond'
WHERE name = $1 AND owner = $2

-- name: LeaseRelease
DELETE FROM msgx_lease WHERE name = $1 AND owner = $2

-- name: LeaseFence
-- First statement of every pump transaction: sets the transaction's statement
-- and lock timeouts, and holds FOR KEY SHARE on the lease row of our epoch
-- until the transaction ends. A takeover (which changes the epoch) waits for
-- the batch; the renewal does not; a batch of an owner that lost the lease
-- finds no row. Returns whether the lease is still unexpired.
SELECT l.expires_at > COALESCE($6::timestamptz, now())
FROM msgx_lease l, (SELECT set_config('statement_timeout', $4, true), set_config('lock_timeout', $5, true)) AS t
WHERE l.name = $1 AND l.owner = $2 AND l.epoch = $3
FOR KEY SHARE OF l

-- name: LeaseHolder
-- Who holds (or last held, when expired) a lease: status shows it.
SELECT owner, expires_at FROM msgx_lease WHERE name = $1
