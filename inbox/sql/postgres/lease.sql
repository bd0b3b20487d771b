-- name: LeaseAcquire
-- Takes the lease when it is free, expired, or already ours; a new owner gets
-- the next epoch. Setting the epoch (a unique key column) locks the row FOR
-- UPDATE, so a takeover waits for the old owner's running batch to end.
INSERT INTO msgx_lease (name, owner, expires_at, epoch) VALUES ($1, $2, $3, 1)
ON CONFLICT (name) DO UPDATE SET owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at,
    epoch = msgx_lease.epoch + CASE WHEN msgx_lease.owner = EXCLUDED.owner THEN 0 ELSE 1 END
WHERE msgx_lease.owner = EXCLUDED.owner OR msgx_lease.expires_at <= $4
RETURNING owner, epoch

-- name: LeaseRenew
-- Touches expires_at only: a no-key update, which the pump's FOR KEY SHARE
-- fence never blocks.
UPDATE msgx_lease SET expires_at = $3 WHERE name = $1 AND owner = $2

-- name: LeaseRelease
DELETE FROM msgx_lease WHERE name = $1 AND owner = $2

-- name: LeaseFence
-- First statement of every pump transaction: sets the transaction's statement
-- and lock timeouts, and holds FOR KEY SHARE on the lease row of our epoch
-- until the transaction ends. A takeover (which changes the epoch) waits for
-- the batch; the renewal does not; a batch of an owner that lost the lease
-- finds no row.
SELECT l.expires_at
FROM msgx_lease l, (SELECT set_config('statement_timeout', $4, true), set_config('lock_timeout', $5, true)) AS t
WHERE l.name = $1 AND l.owner = $2 AND l.epoch = $3
FOR KEY SHARE OF l
